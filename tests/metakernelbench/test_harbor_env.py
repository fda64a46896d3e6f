"""The local environment hides the repository's history also when the checkout is a git worktree."""

from __future__ import annotations

from metakernelbench.harbor_env import _git_dirs_of_worktree


def test_a_worktree_hides_its_git_folder_and_the_main_checkouts(tmp_path):
    main_git = tmp_path / "main" / ".git"
    gitdir = main_git / "worktrees" / "wt"
    gitdir.mkdir(parents=True)
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {gitdir}\n")
    assert _git_dirs_of_worktree(worktree / ".git") == [gitdir.resolve(), main_git.resolve()]


def test_a_plain_checkout_adds_nothing(tmp_path):
    (tmp_path / ".git").mkdir()
    assert _git_dirs_of_worktree(tmp_path / ".git") == []
    assert _git_dirs_of_worktree(tmp_path / "missing" / ".git") == []
