"""How tokenizers spell bytes in their token strings, and how to get the bytes back.

Vocabularies do not store the bytes a token adds to the text; they store a spelling of them:

* byte-level BPE (GPT-2 and its descendants) maps each of the 256 byte values to a printable
  character, so ``Ġ`` is a space and ``Ċ`` a newline;
* SentencePiece writes a space as ``▁`` (U+2581) and, with byte fallback, keeps 256 tokens
  ``<0x00>`` .. ``<0xFF>`` that each stand for one raw byte (often half a UTF-8 character).

These helpers undo those spellings. They are shared by the GGUF and Hugging Face readers.
"""

from __future__ import annotations

import re
from functools import lru_cache

SPM_SPACE = "\u2581"

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")

# Texts of special tokens that end a generation, whatever the declared EOS is. Chat models stop
# on their end-of-turn marker, which is often not the tokenizer's EOS (SmolLM2's <|endoftext|>
# vs <|im_end|>, Gemma's <eos> vs <end_of_turn>). llama.cpp keeps a list like this one.
END_OF_GENERATION_TEXTS = frozenset({
    "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|end_of_text|>",
    "<end_of_turn>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<EOT>", "_<EOT>",
    "[EOT]", "[EOS]", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>",
})


@lru_cache(maxsize=1)
def byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet: printable character -> the byte it stands for.

    Bytes that are printable Latin-1 characters (``!``..``~``, ``¡``..``¬``, ``®``..``ÿ``)
    stand for themselves; the other 68 bytes (controls, space, DEL, NBSP, soft hyphen) are
    given the code points 256, 257, ... in increasing byte order.
    """
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    alphabet = {chr(b): b for b in printable}
    shifted = 0
    for b in range(256):
        if b not in alphabet.values():
            alphabet[chr(256 + shifted)] = b
            shifted += 1
    return alphabet


def byte_level_to_bytes(text: str) -> bytes:
    """Bytes of a byte-level BPE token string (``"Ġthe"`` -> ``b" the"``).

    A character outside the alphabet (possible in hand-edited vocabularies) is kept as its
    own UTF-8, the most faithful reading of a string that was not byte-level encoded.
    """
    alphabet = byte_level_alphabet()
    try:
        return bytes(alphabet[ch] for ch in text)
    except KeyError:
        out = bytearray()
        for ch in text:
            b = alphabet.get(ch)
            if b is None:
                out += ch.encode("utf-8")
            else:
                out.append(b)
        return bytes(out)


def sentencepiece_to_bytes(text: str) -> bytes:
    """Bytes a SentencePiece piece adds in the middle of a text (``"▁the"`` -> ``b" the"``).

    Decoders drop the space of the very first piece of a text; that is a property of the
    text's start, not of the token, so it is not applied here.
    """
    return text.replace(SPM_SPACE, " ").encode("utf-8")


def parse_byte_token(text: str) -> int | None:
    """The byte value of a byte-fallback token ``<0xNN>``, or None for any other text."""
    m = _BYTE_TOKEN.fullmatch(text)
    return int(m.group(1), 16) if m else None
