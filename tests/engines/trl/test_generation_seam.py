"""The GRPO engine times generation by wrapping GRPOTrainer's private ``_generate``: TRL 1.16
has no public seam around it (no callback event; ``rollout_func`` replaces generation rather
than wrapping it). This pins what the wrapper relies on, read from TRL's source without
importing it: the version, the method's signature, and that every generation of a step goes
through it. When TRL changes, this fails: look for a public seam first, then pin anew."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path


def _class(module: str, name: str) -> ast.ClassDef:
    # The file found from the top package's directory: finding a submodule's spec would import
    # its packages (the training stack).
    top, *rest = module.split(".")
    spec = importlib.util.find_spec(top)
    assert spec is not None and spec.submodule_search_locations
    source = Path(next(iter(spec.submodule_search_locations)), *rest[:-1], f"{rest[-1]}.py")
    tree = ast.parse(source.read_text(encoding="utf-8"))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


def test_trl_is_the_version_whose_private_generate_the_engine_wraps() -> None:
    assert importlib.metadata.version("trl") == "1.16.0"
    trainer = _class("trl.trainer.grpo_trainer", "GRPOTrainer")
    generate = _method(trainer, "_generate")
    assert [a.arg for a in generate.args.args] == ["self", "prompts"]
    # A step's completions come from one call of it, where the step's batch is generated.
    calls = [
        node
        for node in ast.walk(_method(trainer, "_generate_and_score_completions"))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "_generate"
    ]
    assert len(calls) == 1
    # Still no event around generation for a callback.
    callback = _class("transformers.trainer_callback", "TrainerCallback")
    events = [n.name for n in callback.body if isinstance(n, ast.FunctionDef)]
    assert "on_step_begin" in events
    assert not [e for e in events if "generat" in e or "rollout" in e]
