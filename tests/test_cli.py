"""`hf-bridge demo` as a new user meets it: their own checkpoint, a cached build said
as such, random weights explained, and its help on what the zoo's architectures keep."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hf_bridge import cli


def test_help_says_every_zoo_architecture_keeps_parity_on_a_cpu(capsys):
    """PaliGemma was the last exception (its whole prompt attends both ways), until
    hf_bridge's CPU attention took prompts whole (`test_cpu_media_attention.py`)."""
    with pytest.raises(SystemExit):
        cli.main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "each keeps parity with transformers on a CPU, in every case transformers can run" in text
    assert "paligemma" in text
    assert "--model MODEL" in text


@pytest.mark.parametrize("command", ["demo", "validate"])
def test_help_gives_the_defaults_an_option_has_and_no_empty_ones(command, capsys):
    """An unset option or a flag had read "(default: None)" or "(default: False)", beside
    help that names the real default ("--max-tokens N ... (default 8)")."""
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: None)" not in text and "(default: False)" not in text
    assert ("(default: llava)" if command == "demo" else "(default: hf_bridge)") in text


def test_a_cached_build_is_reused_and_said_so(zoo, capsys):
    built = zoo("llava")
    args = cli.build_parser().parse_args(["demo", "--arch", "llava"])
    model_dir, side = cli._demo_checkpoint(args)
    out = capsys.readouterr().out
    assert model_dir == built and side == 64
    assert f"Using the tiny llava checkpoint built earlier in {built}" in out
    assert "Building" not in out


def test_a_model_that_is_neither_a_directory_nor_a_fetchable_hub_id_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as here: no hub
    args = cli.build_parser().parse_args(["demo", "--model", str(tmp_path / "missing")])
    with pytest.raises(SystemExit, match="is neither a checkpoint directory nor a hub id that could be fetched"):
        cli._demo_checkpoint(args)
    args = cli.build_parser().parse_args(["demo", "--model", "someone/some-vlm"])
    with pytest.raises(SystemExit, match=r"hf-bridge demo: someone/some-vlm is neither .* download it where the hub is reachable"):
        cli._demo_checkpoint(args)


@pytest.mark.engine
def test_demo_serves_a_checkpoint_given_by_path(zoo):
    model_dir = zoo("llava")
    done = subprocess.run(
        [sys.executable, "-m", "hf_bridge.cli", "demo", "--model", str(model_dir)],
        capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Parity with transformers: PASS" in done.stdout
    assert "weights are random" not in done.stdout  # the user's own weights are not
