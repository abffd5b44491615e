"""The condition/update algebra: both interpreters (pure ``apply`` and rendered DynamoDB expressions) agree
on ``set_if_absent`` (``if_not_exists``) and ``remove``."""

from __future__ import annotations

from fleet.expr import Update, Write


def test_set_if_absent_keeps_what_the_item_has_and_renders_if_not_exists() -> None:
    write = Write(key={"pk": "p"}, update=Update(set={"a": 1}, set_if_absent={"b": 0, "c": 0}))
    assert write.apply({"pk": "p", "b": 7}) == {"pk": "p", "a": 1, "b": 7, "c": 0}
    rendered = write.render()
    assert rendered["UpdateExpression"] == "SET #a = :v0, #b = if_not_exists(#b, :v1), #c = if_not_exists(#c, :v2)"
    assert rendered["ExpressionAttributeValues"] == {":v0": 1, ":v1": 0, ":v2": 0}


def test_remove_drops_attributes_and_renders_a_remove_clause() -> None:
    write = Write(key={"pk": "p"}, update=Update(set={"a": 1}, remove=frozenset({"s", "t"})))
    assert write.apply({"pk": "p", "s": {"x"}, "u": 2}) == {"pk": "p", "a": 1, "u": 2}
    assert write.render()["UpdateExpression"] == "SET #a = :v0 REMOVE #s, #t"
