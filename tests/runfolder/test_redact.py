from playbook.runfolder.redact import REDACTED, redact_env, redact_known, redact_text, secret_values


def test_secret_names_are_hidden():
    env = redact_env({"GITHUB_TOKEN": "x" * 10, "AWS_SECRET_ACCESS_KEY": "abc", "MY_PASSWORD": "p", "SSH_KEY": "k",
                      "PATH": "/usr/bin"})
    assert env == {"AWS_SECRET_ACCESS_KEY": REDACTED, "GITHUB_TOKEN": REDACTED, "MY_PASSWORD": REDACTED,
                   "PATH": "/usr/bin", "SSH_KEY": REDACTED}


def test_secret_values_in_text():
    text = ("pip install --index-url https://alice:s3cr3tpass@pypi.example.com/simple x\n"
            "Authorization: Bearer abcdefghijklmnop\n"
            "using ghp_0123456789abcdefghijABCDEFGHIJ and hf_abcdefghijklmnopqrstuvwxyz0123\n"
            "HF_TOKEN=plainvalue123 make\n")
    clean = redact_text(text)
    for secret in ("s3cr3tpass", "abcdefghijklmnop", "ghp_0123456789", "hf_abcdefghij", "plainvalue123"):
        assert secret not in clean
    assert "https://alice:<redacted>@pypi.example.com/simple" in clean


def test_known_values_are_masked_verbatim():
    secrets = secret_values({"OPENAI_API_KEY": "zzz-very-private", "PATH": "/bin", "SHORT_TOKEN": "abc"})
    assert secrets == ["zzz-very-private"]
    assert redact_known("echo zzz-very-private", secrets) == f"echo {REDACTED}"


def test_ordinary_build_lines_are_untouched():
    line = "-- Found CUDAToolkit: /usr/local/cuda/include (found version \"12.4.131\")"
    assert redact_text(line) == line


def test_prose_about_tokens_is_untouched():
    line = "GPU build: best token generation 940.1 t/s at n_gpu_layers=17"
    assert redact_text(line) == line
    assert redact_text("Authorization: token ghp1234567890abcdef") == f"Authorization: token {REDACTED}"


def test_url_passwords_are_masked_alone_too():
    from playbook.runfolder.redact import run_secrets

    secrets = run_secrets({"PIP_INDEX_URL": "https://alice:hunter2-long@example.org/simple"},
                          {"MY_BUILD_PASSWORD": "from-parameters-1"})
    assert set(secrets) == {"hunter2-long", "from-parameters-1"}
    assert redact_known("pip: bad password hunter2-long", secrets) == f"pip: bad password {REDACTED}"


def test_json_and_notebooks_stay_valid(tmp_path):
    import json

    from playbook.runfolder.redact import redact_file

    notebook = tmp_path / "01-detect.ipynb"
    notebook.write_text(json.dumps({"cells": [{"outputs": [{"text": ['token is "sk-abcdefghijklmnopqrstuvwxyz"\n'],
                                                              "data": {"image/png": "iVBORw0KGgoAKIAABCDEFGHIJKLMNOP"}}]}],
                                    "env": {"HF_TOKEN": "short", "PATH": "/bin"}}))
    assert redact_file(notebook, [])
    data = json.loads(notebook.read_text())
    assert data["cells"][0]["outputs"][0]["text"] == [f'token is "{REDACTED}"\n']
    assert data["cells"][0]["outputs"][0]["data"]["image/png"] == "iVBORw0KGgoAKIAABCDEFGHIJKLMNOP"
    assert data["env"] == {"HF_TOKEN": REDACTED, "PATH": "/bin"}
    assert not redact_file(notebook, [])  # nothing left: not rewritten


def test_a_parameter_that_counts_tokens_is_not_a_secret():
    """A name that contains "token" is not a secret: verify.gen_tokens is a count (issue 25)."""
    line = "playbook run --set verify.gen_tokens=8 --set verify.prompt_tokens=32 --set max_tokens=4"
    assert redact_text(line) == line
    secrets = ("HF_TOKEN=hf-value-1 build.env.MY_API_KEY=key-value-2 auth_token=value-3 PGPASSWORD=value-4 "
               "AWS_SECRET_ACCESS_KEY=value-5 CMAKE_ARGS=-DSOME_TOKEN=value-6 --x=GITHUB_TOKEN=value-7")
    clean = redact_text(secrets)
    assert [f"value-{n}" in clean for n in range(1, 8)] == [False] * 7, clean
    assert "build.env.MY_API_KEY=<redacted>" in clean and redact_text(clean) == clean
