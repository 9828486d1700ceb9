"""The public API reads well from the top-level package and every exported name resolves."""

from __future__ import annotations

import subprocess
import sys

import formcast


def test_every_exported_name_resolves():
    for name in formcast.__all__:
        assert getattr(formcast, name) is not None, name


def test_unknown_name_is_a_clear_attribute_error():
    try:
        formcast.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_import_is_light():
    # Importing the package must not pull model runtimes or torch.
    code = ("import sys, formcast; bad = [m for m in ('llama_cpp', 'torch', 'transformers', "
            "'jsonschema') if m in sys.modules]; print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_regex_to_mask_in_a_few_lines(smollm2_vocab):
    grammar = formcast.Grammar.from_regex(r"(yes|no)")
    matcher = formcast.Matcher(grammar, smollm2_vocab)
    mask = matcher.next_token_mask()
    allowed = {smollm2_vocab.token_bytes[t] for t in mask.nonzero()[0]}
    assert allowed and all(b"yes".startswith(b) or b"no".startswith(b) for b in allowed)
