"""The command line: help, version, exit codes, and config errors that name file:line and key."""
from conftest import REPO, run_sparkd


def test_help_lists_every_subcommand():
    r = run_sparkd("--help")
    assert r.returncode == 0
    for cmd in ("serve", "check", "generate", "tokenize", "detokenize", "template", "bench", "version"):
        assert f"sparkd {cmd}" in r.stdout or f"sparkd [{cmd}]" in r.stdout, cmd


def test_version():
    r = run_sparkd("version")
    assert r.returncode == 0
    assert r.stdout.startswith("sparkd 0.")


def test_unknown_command_is_a_usage_error():
    r = run_sparkd("frobnicate")
    assert r.returncode == 2
    assert "unknown command 'frobnicate'" in r.stderr


def test_serve_without_config_is_a_usage_error():
    r = run_sparkd("serve")
    assert r.returncode == 2
    assert "--config" in r.stderr


def broken(tmp_path, body):
    p = tmp_path / "spark.toml"
    p.write_text('[model]\npath = "m.gguf"\n' + body)
    return p


def test_typo_key_names_file_line_and_key(tmp_path):
    p = broken(tmp_path, "[server]\nprot = 9000\n")
    for cmd in ("serve", "check"):
        r = run_sparkd(cmd, "--config", p)
        assert r.returncode == 2, r.stderr
        assert f"{p}:4:1" in r.stderr and "'prot'" in r.stderr and "did you mean 'port'" in r.stderr


def test_wrong_type_names_file_line_and_key(tmp_path):
    p = broken(tmp_path, "[engine]\nmax_num_seqs = \"lots\"\n")
    r = run_sparkd("serve", "--config", p)
    assert r.returncode == 2
    assert f"{p}:4:1" in r.stderr and "max_num_seqs" in r.stderr and "an integer" in r.stderr


def test_port_out_of_range(tmp_path):
    p = broken(tmp_path, "[server]\nport = 70000\n")
    r = run_sparkd("serve", "--config", p)
    assert r.returncode == 2
    assert f"{p}:4:1" in r.stderr and "port = 70000" in r.stderr and "0 to 65535" in r.stderr


def test_bad_override_is_refused(tmp_path):
    r = run_sparkd("serve", "--config", REPO / "spark.toml", "--set", "server.port=70000")
    assert r.returncode == 2
    assert "--set server.port=70000" in r.stderr


def test_missing_config_file(tmp_path):
    r = run_sparkd("serve", "--config", tmp_path / "nope.toml")
    assert r.returncode == 2
    assert "cannot read the config file" in r.stderr


def test_each_subcommand_prints_its_usage_with_help():
    for cmd in ("serve", "check", "generate", "tokenize", "detokenize", "template", "bench", "version"):
        for flag in ("--help", "-h"):
            r = run_sparkd(cmd, flag)
            assert r.returncode == 0, (cmd, r.stderr)
            assert r.stdout.startswith("usage:\n"), (cmd, r.stdout)
            assert f"sparkd {cmd}" in r.stdout or f"sparkd [{cmd}]" in r.stdout, (cmd, r.stdout)
            others = {"check", "generate", "tokenize", "detokenize", "template", "bench"} - {cmd}
            assert not any(f"sparkd {o} " in r.stdout for o in others), (cmd, r.stdout)
    # --help after other flags still answers with the usage, not "needs a value".
    r = run_sparkd("check", "--config", REPO / "spark.toml", "--help")
    assert r.returncode == 0 and "sparkd check" in r.stdout


def test_syntax_error_quotes_the_line_with_a_caret(tmp_path):
    p = broken(tmp_path, "[engine]\nblock_size = = 16\n")
    r = run_sparkd("check", "--config", p)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"sparkd check: error: {p}:4:14: [engine] block_size: invalid TOML"), r.stderr
    assert lines[1] == "    4 | block_size = = 16"
    assert lines[2] == "      |              ^"


def test_serve_exits_when_the_model_fails_to_load_at_once(tmp_path):
    """A model that fails at once: the HTTP listener started just before must not keep the
    process serving 503s forever (the stop used to be lost when it came before listening)."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + b"\xff" * 60)
    config = tmp_path / "spark.toml"
    config.write_text(f'[model]\npath = "{model}"\n[engine]\nbackend = "cpu"\n[server]\nport = 0\n')
    for _ in range(5):
        r = run_sparkd("serve", "--config", config, timeout=10)
        assert r.returncode != 0 and str(model) in r.stderr, r.stderr
