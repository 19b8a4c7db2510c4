"""The Grafana settings docs/grafana.md documents, read with Grafana's own semantics, against
the claims of a real link token:

- ``[auth.jwt]`` keys and the ``GF_AUTH_JWT_*`` variables of the Compose example say the same;
- ``expect_claims`` is JSON whose ``iss`` must equal the token's and whose ``aud`` must be
  among the token's audiences (Grafana's check through go-jose's ``Expected``);
- ``username_claim``, ``role_attribute_path`` and ``org_attribute_path`` are JMESPath
  expressions (Grafana evaluates them with go-jmespath); ``org_attribute_path`` is read as a
  list of strings (``SearchJSONForStringSliceAttr``: a string result maps to no organisation);
- ``org_mapping`` is ``EXTERNAL:ORG:ROLE`` entries separated by spaces or commas.

A link of project maths then signs in to the organisation maths only, as a Viewer; the path
the page documented before (``org_attribute_path = project``, a string claim) maps to none.
The dashboard a project's organisation provisions is locked to that project."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jmespath
import jwt

from akka_training.telemetry import dashboard
from akka_training.telemetry.grafana import GrafanaLinks
from tests.telemetry.test_grafana import END, START

DOCS = Path(__file__).resolve().parents[2] / "docs" / "grafana.md"


def _ini() -> configparser.ConfigParser:
    blocks = re.findall(r"```ini\n(.*?)```", DOCS.read_text(), re.S)
    assert blocks, "docs/grafana.md has no ini block"
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=None)
    parser.read_string("\n".join(blocks))
    return parser


def _compose_env() -> dict[str, str]:
    import yaml

    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), re.S)
    compose = next(yaml.safe_load(b) for b in blocks if "GF_AUTH_JWT_ENABLED" in b)
    return {k: str(v) for k, v in compose["grafana"]["environment"].items()}


def _string_slice(claims: dict[str, Any], path: str) -> list[str]:
    """Grafana's SearchJSONForStringSliceAttr: the JMESPath result as a list of strings; any
    other result (a plain string among them) gives none."""
    found = jmespath.search(path, claims)
    if isinstance(found, list):
        return [v for v in found if isinstance(v, str)]
    return []


def _org_mapping(value: str) -> dict[str, tuple[str, str]]:
    mapping: dict[str, tuple[str, str]] = {}
    for entry in re.split(r"[\s,]+", value.strip()):
        external, org, role = entry.split(":")
        mapping[external] = (org, role)
    return mapping


def _expected_claims_hold(expected: dict[str, Any], claims: dict[str, Any]) -> bool:
    for key, want in expected.items():
        have = claims.get(key)
        if key == "aud":
            audiences = have if isinstance(have, list) else [have]
            wanted = want if isinstance(want, list) else [want]
            if not all(w in audiences for w in wanted):
                return False
        elif have != want:
            return False
    return True


def _claims(tmp_path: Path, project: str, **kwargs: Any) -> tuple[dict[str, Any], str]:
    links = GrafanaLinks("https://grafana.example", "akka-training", None, tmp_path, 600, **kwargs)
    url, _ = links.link(project, "run-1", START, END)
    token = parse_qs(urlsplit(url).query)["auth_token"][0]
    return jwt.decode(token, options={"verify_signature": False}), url


def test_the_documented_settings_sign_a_link_in_to_its_project_s_organisation_only(
    tmp_path: Path,
) -> None:
    settings = _ini()["auth.jwt"]
    claims, _ = _claims(tmp_path, "maths")

    assert settings.getboolean("enabled") and settings.getboolean("url_login")
    expected = json.loads(settings["expect_claims"])
    assert expected == {"iss": "akka-training", "aud": "grafana"}
    assert _expected_claims_hold(expected, claims)
    assert jmespath.search(settings["username_claim"], claims) == "akka-training:maths"
    assert jmespath.search(settings["role_attribute_path"], claims) == "Viewer"

    orgs = _string_slice(claims, settings["org_attribute_path"])
    assert orgs == ["maths"]
    mapping = _org_mapping(settings["org_mapping"])
    assert [mapping[o] for o in orgs if o in mapping] == [("maths", "Viewer")]
    assert _ini()["users"]["auto_assign_org_role"] == "None"

    # What the page documented before: a string claim, which Grafana maps to no organisation.
    assert _string_slice(claims, "project") == []


def test_a_token_for_another_audience_or_issuer_is_refused(tmp_path: Path) -> None:
    expected = json.loads(_ini()["auth.jwt"]["expect_claims"])
    other_audience, _ = _claims(tmp_path / "a", "maths", audience="another-app")
    other_issuer, _ = _claims(tmp_path / "b", "maths", issuer="someone-else")
    assert not _expected_claims_hold(expected, other_audience)
    assert not _expected_claims_hold(expected, other_issuer)


def test_the_compose_environment_says_what_the_ini_says() -> None:
    settings = _ini()["auth.jwt"]
    env = _compose_env()
    for key in (
        "expect_claims",
        "username_claim",
        "role_attribute_path",
        "org_attribute_path",
        "org_mapping",
        "header_name",
    ):
        variable = "GF_AUTH_JWT_" + key.upper()
        assert variable in env, variable
        if key == "expect_claims":
            assert json.loads(env[variable]) == json.loads(settings[key])
        else:
            assert env[variable] == settings[key], variable
    assert env["GF_USERS_AUTO_ASSIGN_ORG_ROLE"] == _ini()["users"]["auto_assign_org_role"]


def test_a_project_s_dashboard_is_locked_to_it() -> None:
    locked = dashboard.build(project="maths")
    variables = {v["name"]: v for v in locked["templating"]["list"]}
    project = variables["project"]
    assert (project["type"], project["hide"], project["query"]) == ("constant", 2, "maths")
    # No variable lists other projects: the run list is the constant project's.
    queries = [v["definition"] for v in variables.values() if "definition" in v]
    assert all('akka_optimize_training_project="$project"' in q for q in queries)
    # Every job panel selects the dashboard's project.
    for panel in locked["panels"]:
        for target in panel.get("targets", []):
            if "run_id" in target["expr"]:
                assert 'akka_optimize_training_project="$project"' in target["expr"]
    shared = {v["name"]: v for v in dashboard.build()["templating"]["list"]}
    assert shared["project"]["type"] == "query"
