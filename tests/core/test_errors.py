from akka_training.core.errors import NotFound, PlanRefused, Problem, error_from_json


def test_errors_survive_the_wire() -> None:
    err = error_from_json(NotFound("no run x").to_json(), 404)
    assert isinstance(err, NotFound)
    assert err.message == "no run x"
    refused = PlanRefused([Problem("a", "set a"), Problem("b", "set b")])
    back = error_from_json(refused.to_json(), 422)
    assert isinstance(back, PlanRefused)
    assert [p.message for p in back.problems] == ["set a", "set b"]
    assert "2 problems" in back.message
