"""Build hook for the optional C trie walk, determiniser and NFA builder (everything else is in pyproject.toml).

``optional=True``: on a machine without a C compiler the install still succeeds and the
engine falls back to its numpy walk (slower cold masks, same answers).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            f"formcast.engine.{name}",
            sources=[f"src/formcast/engine/{name}.c"],
            depends=["src/formcast/engine/_determinise_api.h",
                     "src/formcast/engine/_seq_items.h",
                     "src/formcast/engine/_nfa_paste.h",
                     "src/formcast/engine/_parser_closure.h"],
            extra_compile_args=["-O2"],
            optional=True,
        )
        for name in ("_trie_walk", "_determinise", "_nfa_build")
    ]
)
