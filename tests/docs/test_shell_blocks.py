"""Every shell block in docs/ and README.md is run, so the commands the
documentation shows cannot drift from the code (issue 18, item 5), or is
marked ``# not run by tests: REASON`` on its first line, where the reader
sees why. How blocks are run: tests/docs/shell_blocks.py.

docs/embedding.md's blocks run the examples, with free voter ports given
as their argument: tests/docs/test_embedding_doc.py runs them.
"""

from __future__ import annotations

import pytest
import test_embedding_doc
from shell_blocks import PAGES, ROOT, run_page, shell_blocks

RUN_ELSEWHERE = {ROOT / "docs" / "embedding.md": "tests/docs/test_embedding_doc.py"}
RUN_HERE = [
    page
    for page in PAGES
    if page not in RUN_ELSEWHERE and any(block.not_run_reason is None for block in shell_blocks(page))
]


def test_every_shell_block_is_run_or_says_why_not():
    unmarked = []
    for page in PAGES:
        for block in shell_blocks(page):
            if block.not_run_reason is not None or page not in RUN_ELSEWHERE:
                continue
            commands = [command.text for command in block.commands()]
            if commands not in [[command] for command, _ in test_embedding_doc.shell_blocks()]:
                unmarked.append(block.where)
    assert not unmarked, f"shell blocks that {RUN_ELSEWHERE} does not run: {unmarked}"
    assert len(RUN_HERE) >= 5, RUN_HERE


def test_marked_blocks_give_a_reason_and_unmarked_ones_have_commands():
    for page in PAGES:
        for block in shell_blocks(page):
            if block.not_run_reason is None:
                assert block.commands(), f"{block.where}: a shell block with no command"
            else:
                assert len(block.not_run_reason) >= 10, f"{block.where}: say why it is not run"


@pytest.mark.processes
@pytest.mark.parametrize("page", RUN_HERE, ids=[str(page.relative_to(ROOT)) for page in RUN_HERE])
def test_every_shell_block_of_the_page_runs_as_shown(page, tmp_path):
    failures = run_page(page, tmp_path)
    assert not failures, "\n\n".join(failures)
