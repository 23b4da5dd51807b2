import pytest

from .recipe_text import edited, replace_once


def test_an_edit_that_takes_once():
    assert replace_once("port: 8100\n", "port: 8100", "port: 9") == "port: 9\n"
    assert edited("a b", ("a", "x"), ("b", "y")) == "x y"


@pytest.mark.parametrize("text", ["port: 8200\n", "port: 8100\nport: 8100\n"])
def test_an_edit_that_misses_or_is_ambiguous_fails(text):
    with pytest.raises(AssertionError, match="did not take"):
        replace_once(text, "port: 8100", "port: 9")
