"""lark's compiled terminal pattern for grammar.lark, so that parsing imports no lark.

Written with lark 1.3.1 by `python -c "from sexpgpu_lang.syntax import write_lexer_table;
write_lexer_table()"`; do not edit. `syntax.py` uses it only while GRAMMAR is grammar.lark's text;
tests/test_lexer_table.py compares it with lark's.
"""

GRAMMAR = '// SexpGPU run-file syntax (docs/dev/design.md#syntax): S-expressions with lists,\n// vectors, keywords, symbols, numbers and strings. Its terminals are the\n// lexer; sexpgpu_lang/syntax.py balances the token stream and applies the\n// `list` and `vector` rules below to it (an LALR parse of the same balanced\n// tokens gives the same trees; benchmarks/parse_incremental.py --check).\nstart: _item*\n_item: list | vector | atom\nlist: LPAR _item* RPAR\nvector: LBRACK _item* RBRACK\natom: FLOAT | INT | STRING | KEYWORD | SYMBOL\n\nLPAR: "("\nRPAR: ")"\nLBRACK: "["\nRBRACK: "]"\n// STRING unrolled (a run of plain characters, then escapes each followed by one): the same strings\n// as /"(?:[^"\\\\\\n]|\\\\.)*"/, but Python\'s `re` keeps no state per character (linear memory)\nSTRING: /"[^"\\\\\\n]*(?:\\\\.[^"\\\\\\n]*)*"/\nFLOAT.3: /[+-]?(?:\\d+\\.\\d*|\\.\\d+|\\d+)[eE][+-]?\\d+|[+-]?(?:\\d+\\.\\d*|\\.\\d+)/\nINT.2: /[+-]?\\d+/\nKEYWORD.1: /:[^\\s()\\[\\]";\\x00-\\x1f\\x7f]+/\nSYMBOL: /[^\\s()\\[\\]";:0-9\\ufeff\\x00-\\x1f\\x7f][^\\s()\\[\\]";\\ufeff\\x00-\\x1f\\x7f]*/\nCOMMENT: /;[^\\r\\n]*/\nWS: /[ \\t\\f\\r\\n\\v\\ufeff]+/\n%ignore COMMENT\n%ignore WS\n'

PATTERN = '(?P<FLOAT>[+-]?(?:\\d+\\.\\d*|\\.\\d+|\\d+)[eE][+-]?\\d+|[+-]?(?:\\d+\\.\\d*|\\.\\d+))|(?P<INT>[+-]?\\d+)|(?P<KEYWORD>:[^\\s()\\[\\]";\x00-\x1f\x7f]+)|(?P<SYMBOL>[^\\s()\\[\\]";:0-9\ufeff\x00-\x1f\x7f][^\\s()\\[\\]";\ufeff\x00-\x1f\x7f]*)|(?P<STRING>"[^"\\\\\n]*(?:\\\\.[^"\\\\\n]*)*")|(?P<WS>[ \t\x0c\r\n\\v\ufeff]+)|(?P<COMMENT>;[^\r\n]*)|(?P<LBRACK>\\[)|(?P<LPAR>\\()|(?P<RBRACK>\\])|(?P<RPAR>\\))'

FLAGS = 32
