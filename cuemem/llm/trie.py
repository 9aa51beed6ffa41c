"""A token trie over a set of options: the constraint behind `choose` (docs/design.md promise 5, SCG-MEM's schema).

Each option's token ids end with a terminator token, so an option that is a prefix of another still has its own
leaf; every path from the root to a leaf spells exactly one option.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Node:
    children: dict[int, Node] = field(default_factory=dict)
    option: int | None = None  # index of the option this leaf completes


class TokenTrie:
    def __init__(self, sequences: Sequence[Sequence[int]], terminator: int) -> None:
        self.root = Node()
        self.terminator = terminator
        self.depth = 0
        for index, tokens in enumerate(sequences):
            node = self.root
            for token in [*tokens, terminator]:
                node = node.children.setdefault(token, Node())
            if node.option is None:  # identical token sequences: the first option wins
                node.option = index
            self.depth = max(self.depth, len(tokens) + 1)

    def walk(self, tokens: Sequence[int]) -> Node | None:
        node: Node | None = self.root
        for token in tokens:
            node = node.children.get(token) if node else None
        return node
