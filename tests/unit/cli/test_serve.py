"""``coldscope serve``'s command line: bad input is one line and exit 2, before anything
starts."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from coldscope.cli.main import main


def test_bad_replica_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--replica-label", "(", "--store", str(tmp_path / "s.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --replica-label is not a regular expression")
    assert err.count("\n") == 1


@pytest.mark.parametrize("content", ["", "two words", "x" * 5000])
def test_bad_token_file(tmp_path: Path, content: str, capsys: pytest.CaptureFixture[str]) -> None:
    token = tmp_path / "token"
    token.write_text(content)
    token.chmod(0o600)
    assert main(["serve", "--token-file", str(token), "--store", str(tmp_path / "s.db")]) == 2
    assert "must hold one token" in capsys.readouterr().err


def test_port_in_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert main(["serve", "--port", str(port), "--store", str(tmp_path / "s.db")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot listen on 127.0.0.1:{port}") and err.count("\n") == 1


def test_bad_model_root_and_startup_model(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "model.json"
    bad.write_text("{not json")
    assert main(["serve", "--startup-model", str(bad), "--store", str(tmp_path / "s.db"),
                 "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
