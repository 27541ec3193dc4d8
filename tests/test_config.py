import re
from pathlib import Path

import pytest

from crawdad.config import (
    RunConfig,
    diff_settings,
    load_config,
    public_dump,
    result_settings,
    url_hints,
)
from crawdad.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_papers() -> None:
    cfg = RunConfig()
    assert [(a.name, a.model) for a in cfg.agents] == [
        ("qwen3", "qwen3:32b"),
        ("deepseek-r1", "deepseek-r1:32b"),
    ]
    assert cfg.agents[0].temperature == 0.6 and cfg.agents[0].top_p == 0.95 and cfg.agents[0].think
    assert (
        cfg.extractor.model == "granite3.3:2b"
        and cfg.extractor.temperature == 0
        and not cfg.extractor.think
    )
    assert cfg.protocol.max_turns == 4 and cfg.protocol.early_stop
    assert cfg.agents[0].base_urls == ["http://localhost:11434"]


def test_ollama_host_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "10.1.2.3:11500")
    assert RunConfig().extractor.base_urls == ["http://10.1.2.3:11500"]


def test_toml_then_flags(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'seed = 3\nconcurrency = 8\n[protocol]\nmax_turns = 6\n[extractor]\nbackend = "openai"\n',
    )
    cfg = load_config(path, {"seed": 5})
    assert (cfg.seed, cfg.concurrency, cfg.protocol.max_turns) == (5, 8, 6)
    assert cfg.extractor.base_urls == ["http://localhost:8000/v1"]


def test_typo_is_rejected_with_suggestion(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "[[agents]]\nname='a'\nmodel='m'\ntemperatur=0.2\n[[agents]]\nname='b'\nmodel='n'\n",
    )
    with pytest.raises(
        ConfigError, match=r"agents\.0\.temperatur: unknown key \(did you mean 'temperature'\?\)"
    ):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[protocol]\nmax_turns = 0\n",
            r"protocol\.max_turns: Input should be greater than or equal to 1",
        ),
        (
            "[extractor]\ntop_p = 1.5\n",
            r"extractor\.top_p: Input should be less than or equal to 1",
        ),
        ("concurrency = 'many'\n", r"concurrency: Input should be a valid integer"),
        ("schedule = 'random'\n", r"schedule: Input should be 'fifo' or 'grouped'"),
        ("seed = 1\nseed = 2\n", "is not valid TOML"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, text))


def test_same_agent_names_rejected() -> None:
    with pytest.raises(ConfigError, match="agent names must differ"):
        load_config(None, {"agents": [{"name": "a", "model": "x"}, {"name": "a", "model": "y"}]})


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_secret_never_dumped(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = load_config(None, {"extractor": {"backend": "openai", "api_key": "sk-secret-123"}})
    assert cfg.extractor.resolved_api_key() == "sk-secret-123"
    assert "sk-secret-123" not in str(public_dump(cfg))
    monkeypatch.setenv("MY_KEY", "sk-env-456")
    cfg = load_config(None, {"extractor": {"backend": "openai", "api_key_env": "MY_KEY"}})
    assert cfg.extractor.resolved_api_key() == "sk-env-456" and "sk-env-456" not in str(
        public_dump(cfg)
    )


def test_operational_settings_may_change_on_resume() -> None:
    a = public_dump(load_config(None, {"concurrency": 4}))
    b = public_dump(
        load_config(None, {"concurrency": 64, "extractor": {"base_urls": ["http://h:1"]}})
    )
    assert diff_settings(result_settings(a), result_settings(b)) == []
    c = public_dump(load_config(None, {"seed": 9}))
    assert diff_settings(result_settings(a), result_settings(c)) == ["seed: 0 -> 9"]


@pytest.mark.parametrize(
    "path",
    sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.toml")),
    ids=lambda p: p.name,
)
def test_shipped_configs_are_valid(path: Path) -> None:
    cfg = load_config(path)
    assert len(cfg.agents) == 2


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:11434", "'localhost:11434' has no scheme: write 'http://localhost:11434'"),
        ("ftp://x", "uses ftp://, but model servers speak HTTP: write 'http://x'"),
        ("http//x", "'http//x' is malformed: write 'http://x'"),
        ("http:/x:1", "'http:/x:1' is malformed: write 'http://x:1'"),
        ("11434", "'11434' is a port alone: write 'http://localhost:11434'"),
        ("", "is empty: write a server URL"),
        ("gpu1", "has no scheme and no port: write e.g. 'http://gpu1:11434' (Ollama)"),
        ("http://", "has no host"),
        ("http://h:99999", "has a bad port"),
    ],
)
def test_bad_urls_are_named_with_their_fix(url: str, message: str) -> None:
    agents = [{"name": "a", "model": "x"}, {"name": "b", "model": "y", "base_urls": [url]}]
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        load_config(None, {"agents": agents})
    assert "  - agents.1.base_urls.0: " in str(info.value)


def test_good_urls_pass_and_lose_the_trailing_slash() -> None:
    cfg = load_config(None, {"extractor": {"base_urls": ["https://gpu1:8443/", "http://[::1]:5"]}})
    assert cfg.extractor.base_urls == ["https://gpu1:8443", "http://[::1]:5"]


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("10.1.2.3:11500", "http://10.1.2.3:11500"),
        ("0.0.0.0", "http://0.0.0.0:11434"),
        (":11435", "http://127.0.0.1:11435"),
        ("https://ollama.lab", "https://ollama.lab:443"),
        ("http://gpu1:11434/", "http://gpu1:11434"),
    ],
)
def test_ollama_host_read_as_ollama_does(
    monkeypatch: pytest.MonkeyPatch, host: str, url: str
) -> None:
    monkeypatch.setenv("OLLAMA_HOST", host)
    assert RunConfig().agents[0].base_urls == [url]


def test_bad_ollama_host_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_HOST", "ftp://x")
    with pytest.raises(ConfigError, match=r"OLLAMA_HOST='ftp://x': .* uses ftp://"):
        load_config()


def test_url_hints_fit_the_backend() -> None:
    cfg = load_config(
        None,
        {
            "agents": [
                {"name": "a", "model": "x", "backend": "openai", "base_urls": ["http://h:8000"]},
                {"name": "b", "model": "y", "base_urls": ["http://h:11434/v1"]},
            ],
            "extractor": {"backend": "openai"},
        },
    )
    hints = url_hints(cfg)
    assert len(hints) == 2
    assert "agents[0].base_urls[0] 'http://h:8000'" in hints[0] and "'http://h:8000/v1'" in hints[0]
    assert "Ollama's OpenAI-compatible path" in hints[1] and "'http://h:11434'" in hints[1]


def test_unreadable_config_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        load_config(tmp_path)
    path = tmp_path / "c.toml"
    path.write_bytes(b"seed = 1\n# caf\xe9\n")
    with pytest.raises(ConfigError, match=r"c\.toml is not a UTF-8 text file"):
        load_config(path)


def test_errors_are_grouped_by_where_the_value_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "seed = 'x'\n")
    origins = {("concurrency",): "--concurrency 0"}
    with pytest.raises(ConfigError) as info:
        load_config(path, {"concurrency": 0}, origins)
    text = str(info.value)
    assert text.index(f"{path} is not a valid crawdad config:\n  - seed:") >= 0
    assert "--concurrency 0 is not a valid setting:\n  - concurrency:" in text
    # a whole-config error caused by a flag names the file and the flag together
    agents = {"agents": [{"name": "a", "model": "x"}, {"name": "a", "model": "y"}]}
    with pytest.raises(ConfigError, match=r"with --set agents=\.\.\. do not make a valid"):
        load_config(write(tmp_path, ""), agents, {("agents",): "--set agents=..."})


def test_an_experiment_file_given_as_a_run_config_is_named_as_such(tmp_path: Path) -> None:
    exp = tmp_path / "exp.toml"
    exp.write_text('baseline = "a"\n[base]\nseed = 1\n[[variants]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"is an experiment file .* `crawdad experiment "):
        load_config(exp)
