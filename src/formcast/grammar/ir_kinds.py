"""The IR node types and the two constant nodes, as module-level ``Final`` names.

mypyc reads a ``Final`` module name from a C static, from this module and from the modules
that import it. A name imported from ``ir_nodes`` (which stays Python, its types are C types)
is instead a dict lookup in the importing module's globals at every use, ~90 instructions:
``seq()`` alone made 1,700 of them in a tool-call schema's compile. The front end's hot
paths test and build nodes through these names; annotations keep the classes' own names.
"""

from __future__ import annotations

from typing import Final

from formcast.grammar import ir_nodes

LITERAL: Final = ir_nodes.Literal
BYTE_SET: Final = ir_nodes.ByteSet
CHAR_SET: Final = ir_nodes.CharSet
SEQ: Final = ir_nodes.Seq
CHOICE: Final = ir_nodes.Choice
REPEAT: Final = ir_nodes.Repeat
REF: Final = ir_nodes.Ref
EMPTY: Final = ir_nodes.EMPTY
NOTHING: Final = ir_nodes.NOTHING
