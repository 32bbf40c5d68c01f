"""Secret values the launcher can see, and masking them in everything clawgym prints.

Secrets (the W&B key, the SGLang API key) are read from the launcher's environment at
launch. Their *values* must never reach a report, a file or the console, whatever
path they took: a user may also type one into the config (``extra_args=[--wandb-key,
VALUE]``), which validation refuses, but the refusal itself must not echo it.

:func:`known_secrets` lists every value to hide: the secret variables of the
environment, and values given after a secret flag in ``extra_args``.
:func:`redact` masks them in a text. Values are held in memory only.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

#: Secret variables checked even when the config does not name them.
KNOWN_SECRET_ENV = ("WANDB_KEY", "WANDB_API_KEY", "SGLANG_API_KEY")
#: Trainer flags whose value is a secret (slime copies argv into W&B, so they are refused too).
SECRET_FLAGS = ("--wandb-key", "--sglang-api-key")
#: Shorter values are not searched for (they would match ordinary text such as "1").
MIN_SECRET_LEN = 8
#: What a masked value is replaced by.
MASK = "<redacted>"

# Values seen in configs of this process (e.g. after --wandb-key in extra_args); memory only.
_REMEMBERED: List[str] = []


def env_secrets(environ: Mapping[str, str] = os.environ, extra_names: Iterable[str] = ()) -> Dict[str, str]:
    """Variable name -> value of every secret variable set in ``environ`` (long enough to search for)."""
    names = set(KNOWN_SECRET_ENV) | {str(n) for n in extra_names}
    return {n: environ[n] for n in sorted(names) if len(environ.get(n) or "") >= MIN_SECRET_LEN}


#: Parts of a variable name that make its value a secret (WANDB_API_KEY, HF_TOKEN, DB_PASSWORD...).
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "AUTH")
#: ...or a word ending like one (APIKEY, ACCESSTOKEN, DBPASSWORD; not MONKEY).
_SECRET_ENDINGS = ("APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")


def is_secret_name(name: str) -> bool:
    """Whether a variable named ``name`` holds a secret: a known one, or a name with a word such as
    KEY, TOKEN, SECRET or PASSWORD in it (``WANDB_API_KEY``, ``APIKEY``, ``GITHUB_TOKEN``)."""
    upper = str(name).upper()
    if upper in KNOWN_SECRET_ENV:
        return True
    words = [w for w in upper.replace("-", "_").split("_") if w]
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def named_secrets(env: Mapping[str, str]) -> Dict[str, str]:
    """Name -> value of the variables of ``env`` named like a secret (long enough to search for)."""
    return {str(k): str(v) for k, v in env.items()
            if is_secret_name(str(k)) and len(str(v or "")) >= MIN_SECRET_LEN}


def argv_secrets(args: Optional[Sequence[Any]]) -> List[str]:
    """Values given to a secret flag in an argv-like list: ``--wandb-key V``, ``--wandb-key=V``,
    or one element ``"--wandb-key V"``."""
    out: List[str] = []
    items = [str(a) for a in (args or [])]
    for i, item in enumerate(items):
        for word_i, word in enumerate(words := item.split()):
            for flag in SECRET_FLAGS:
                if word == flag:
                    # The value is the next word of the element, else the next element.
                    nxt = words[word_i + 1] if word_i + 1 < len(words) else (items[i + 1] if i + 1 < len(items) else "")
                    if nxt:
                        out.append(nxt)
                elif word.startswith(flag + "="):
                    out.append(word[len(flag) + 1:])
    return [v for v in out if v]


def config_key_env(c: Any) -> List[str]:
    """The W&B key variables a (plain or omegaconf) config names, if it can tell."""
    try:
        return [str(n) for n in (c["wandb"]["key_env"] or [])]
    except Exception:  # noqa: BLE001 - a broken config still gets the default names
        return []


def known_secrets(c: Any = None, environ: Mapping[str, str] = os.environ) -> List[str]:
    """Every secret value to hide: the environment's, those typed into ``c`` and remembered ones."""
    values = set(env_secrets(environ, config_key_env(c) if c is not None else ()).values())
    if c is not None:
        try:
            values.update(argv_secrets(c["extra_args"]))
        except Exception:  # noqa: BLE001
            pass
    values.update(_REMEMBERED)
    # Longest first, so a value containing another is masked whole.
    return sorted((v for v in values if v), key=len, reverse=True)


def remember(values: Iterable[str]) -> None:
    """Mask these values in every later :func:`redact` of this process."""
    for v in values:
        if v and v not in _REMEMBERED:
            _REMEMBERED.append(v)


def redact(text: str, values: Optional[Iterable[str]] = None) -> str:
    """``text`` with every known secret value (or those given) replaced by ``<redacted>``."""
    for v in (known_secrets() if values is None else sorted(values, key=len, reverse=True)):
        if v:
            text = text.replace(v, MASK)
    return text


def redact_value(value: Any, values: Sequence[str]) -> Any:
    """A copy of a config value (str, list, dict) with secret values masked in every string."""
    if isinstance(value, str):
        return redact(value, values)
    if isinstance(value, list):
        return [redact_value(v, values) for v in value]
    if isinstance(value, tuple):
        return tuple(redact_value(v, values) for v in value)
    if isinstance(value, dict):
        return {k: redact_value(v, values) for k, v in value.items()}
    return value


def find_in(text: str, secrets: Mapping[str, str]) -> List[str]:
    """Names of the secrets whose value occurs in ``text``."""
    return [name for name, value in secrets.items() if value and value in text]
