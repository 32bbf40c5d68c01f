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
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

#: Secret variables checked even when the config does not name them.
KNOWN_SECRET_ENV = ("WANDB_KEY", "WANDB_API_KEY", "SGLANG_API_KEY")
#: Trainer flags whose value is a secret (slime copies argv into W&B, so they are refused too).
SECRET_FLAGS = ("--wandb-key", "--sglang-api-key")
#: A flag whose dest or option string names one of these (as whole words) carries a secret:
#: ``--router-api-key``, ``--sglang-admin-api-key``, ``--router-oracle-password``,
#: ``--sglang-ssl-keyfile-password``. Not ``--reward-key`` (a dict key) nor ``*-key-path`` (a file).
_SECRET_WORDS = re.compile(r"(^|[_-])(password|passwd|secret|api[_-]key|wandb[_-]key|auth[_-]token|access[_-]token"
                           r"|hf[_-]token|api[_-]token)([_-]|$)")
#: How a secret flag not read from the environment is refused.
_SECRET_OPTIONS: Dict[str, tuple] = {}
#: Shorter values are not searched for in free text. A key, token or password of 4 characters or more
#: (``sk-1234`` has 7) is masked wherever it appears; below that a value is as likely to be ordinary text
#: ("1", "on", "abc") as a secret, and masking it would rewrite every number and word of a report. Such a
#: value is still masked where it is known to be a secret: the value of a secret-named variable or of a
#: secret flag (:func:`redact_config`).
MIN_SECRET_LEN = 4
#: What a masked value is replaced by.
MASK = "<redacted>"

# Values seen in configs of this process (e.g. after --wandb-key in extra_args); memory only.
_REMEMBERED: List[str] = []


def names_secret(name: str) -> bool:
    """True when a flag's dest or option string names a secret (``router_api_key``, ``--x-password``)."""
    low = name.lower()
    if "key" not in low and "pass" not in low and "secret" not in low and "token" not in low:
        return False  # the common case, without a regex
    return bool(_SECRET_WORDS.search(low.lstrip("-"))) and not low.endswith(("_path", "-path", "_file", "-file"))


def secret_options(flavour: Optional[str] = None) -> tuple:
    """Every option string of a trainer flag that carries a secret, from the flag registries (both
    flavours, or one): :data:`SECRET_FLAGS` and every flag whose dest or option names a key, token,
    password or secret. Cached; a missing registry contributes nothing.

    Each registry's share comes from :data:`SECRET_INDEX` when the index was made from that very
    file (its sha256), else from scanning the registry: validating ``args`` would otherwise read and
    scan the other flavour's registry too, which costs more than the rest of the check."""
    key = flavour or "*"
    if key not in _SECRET_OPTIONS:
        from clawgym.registry import FLAVOURS, RegistryError, load_registry

        found = set(SECRET_FLAGS)
        for fl in ([flavour] if flavour else FLAVOURS):
            indexed = _indexed_secret_options(fl)
            if indexed is not None:
                found.update(indexed)
                continue
            try:
                reg = load_registry(fl)
            except RegistryError:
                continue
            found.update(_scan_secret_options(reg))
        _SECRET_OPTIONS[key] = tuple(sorted(found))
    return _SECRET_OPTIONS[key]


def _scan_secret_options(reg: Any) -> set:
    """The option strings of ``reg``'s actions whose dest or any option string names a secret."""
    found: set = set()
    # The raw records, not Flag objects: this runs in every validation that has args or extra_args.
    for raw in getattr(reg, "_raw", None) or reg.actions:
        dest = raw.get("dest", "") if isinstance(raw, dict) else raw.dest
        opts = raw.get("option_strings", ()) if isinstance(raw, dict) else raw.option_strings
        if names_secret(str(dest)) or any(names_secret(str(o)) for o in opts):
            found.update(opts)
    return found


#: ``clawgym/registry/data/secret_options.json``: per flavour, the sha256 of its registry file and
#: :func:`_scan_secret_options` of it. Derived data, rewritten with the registries
#: (``tools/gen_flag_registry.py``, or :func:`write_secret_index`); tests/test_trainer_flags.py
#: checks that it matches the registries. An entry whose hash does not match is ignored.
SECRET_INDEX = "secret_options.json"


def _indexed_secret_options(flavour: str) -> Optional[tuple]:
    import hashlib
    import json

    from clawgym.registry import DATA_DIR, data_path

    try:
        entry = json.loads((DATA_DIR / SECRET_INDEX).read_text(encoding="utf-8"))["flavours"][flavour]
        digest = hashlib.sha256(data_path(flavour).read_bytes()).hexdigest()
        if entry["sha256"] != digest:
            return None
        return tuple(str(o) for o in entry["options"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_secret_index() -> Any:
    """(Re)write :data:`SECRET_INDEX` from the registries as they are now; returns its path."""
    import hashlib
    import json

    from clawgym.registry import DATA_DIR, FLAVOURS, RegistryError, data_path, load_registry

    flavours = {}
    for fl in FLAVOURS:
        try:
            reg = load_registry(fl)
            digest = hashlib.sha256(data_path(fl).read_bytes()).hexdigest()
        except (RegistryError, OSError):
            continue
        flavours[fl] = {"sha256": digest, "options": sorted(_scan_secret_options(reg))}
    path = DATA_DIR / SECRET_INDEX
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"flavours": flavours}, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def secret_option(token: str) -> Optional[str]:
    """The secret option ``token`` names: exactly, as ``--opt=value``, or as an abbreviation
    (``--wandb-ke``; argparse of upstream slime accepts some); None otherwise."""
    name = token.split("=", 1)[0]
    if not name.startswith("--") or len(name) < 4:
        return None
    options = secret_options()
    if name in options:
        return name
    if names_secret(name):
        return name
    matches = [o for o in options if o.startswith(name)]
    return matches[0] if matches else None


def env_secrets(environ: Mapping[str, str] = os.environ, extra_names: Iterable[str] = ()) -> Dict[str, str]:
    """Variable name -> value of every secret variable set in ``environ`` (long enough to search for)."""
    names = set(KNOWN_SECRET_ENV) | {str(n) for n in extra_names}
    return {n: environ[n] for n in sorted(names) if len(environ.get(n) or "") >= MIN_SECRET_LEN}


#: Parts of an environment variable's name that make its value a secret (WANDB_API_KEY, HF_TOKEN,
#: DB_PASSWORD...). Broader than the flag-name pattern above on purpose: a flag such as --input-key names
#: a dict key, but a variable a script exports with KEY in its name is masked rather than risked.
_ENV_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "CREDENTIAL", "CREDENTIALS", "AUTH")
#: ...or a word ending like one (APIKEY, ACCESSTOKEN, DBPASSWORD; not MONKEY).
_ENV_SECRET_ENDINGS = ("APIKEY", "ACCESSKEY", "SECRETKEY", "PRIVATEKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD")


def is_secret_name(name: str) -> bool:
    """Whether a variable named ``name`` holds a secret: a known one, or a name with a word such as
    KEY, TOKEN, SECRET or PASSWORD in it (``WANDB_API_KEY``, ``APIKEY``, ``GITHUB_TOKEN``)."""
    upper = str(name).upper()
    if upper in KNOWN_SECRET_ENV:
        return True
    words = [w for w in upper.replace("-", "_").split("_") if w]
    return any(w in _ENV_SECRET_WORDS or w.endswith(_ENV_SECRET_ENDINGS) for w in words)


def named_secrets(env: Mapping[str, str]) -> Dict[str, str]:
    """Name -> value of the variables of ``env`` named like a secret (long enough to search for)."""
    return {str(k): str(v) for k, v in env.items()
            if is_secret_name(str(k)) and len(str(v or "")) >= MIN_SECRET_LEN}


def argv_secrets(args: Optional[Sequence[Any]]) -> List[str]:
    """Values given to a secret flag (:func:`secret_option`) in an argv-like list: ``--wandb-key V``,
    ``--wandb-key=V``, or one element ``"--wandb-key V"``."""
    out: List[str] = []
    items = [str(a) for a in (args or [])]
    for i, item in enumerate(items):
        for word_i, word in enumerate(words := item.split()):
            if secret_option(word) is None:
                continue
            if "=" in word:
                out.append(word.split("=", 1)[1])
            else:
                # The value is the next word of the element, else the next element.
                nxt = words[word_i + 1] if word_i + 1 < len(words) else (items[i + 1] if i + 1 < len(items) else "")
                if nxt:
                    out.append(nxt)
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


# ---------------------------------------------------------------- configs and reports

def _extra_env_secret_values(c: Any) -> List[str]:
    try:
        env = c["extra_env"] or {}
    except Exception:  # noqa: BLE001 - a config without extra_env holds none
        return []
    return [str(v) for k, v in env.items() if is_secret_name(str(k)) and v not in (None, "")]


def _args_secret_values(c: Any) -> List[str]:
    """Values of ``args.<dest>`` whose dest names a secret, and after secret flags in ``args`` lists."""
    out: List[str] = []
    try:
        args = c["args"] or {}
    except Exception:  # noqa: BLE001
        return out
    for dest, value in args.items():
        if isinstance(value, list):
            out += argv_secrets([x for x in value if not isinstance(x, (list, dict))])
        elif names_secret(str(dest)) and value not in (None, "", True, False):
            out.append(str(value))
    return out


def config_secret_values(c: Any = None, environ: Mapping[str, str] = os.environ) -> List[str]:
    """Every secret value a (plain) config holds or the environment knows, longest first: the
    environment's (:func:`known_secrets`), values after secret flags in ``extra_args`` and ``args``
    lists, ``args.<dest>`` naming a secret, and every ``extra_env`` variable named like a secret."""
    values = set(known_secrets(c, environ))
    if c is not None:
        values.update(_extra_env_secret_values(c))
        values.update(_args_secret_values(c))
    return sorted((v for v in values if v), key=len, reverse=True)


def _searchable(values: Iterable[str]) -> List[str]:
    return [v for v in values if len(v) >= MIN_SECRET_LEN]


def redact_argv(argv: Sequence[Any], values: Sequence[str] = ()) -> List[Any]:
    """An argv-like list with the value after every secret flag masked (``--router-api-key V``,
    ``--x-password=V``), whatever its length, then ``values`` masked in every element."""
    items = [str(a) for a in argv]
    out: List[Any] = []
    mask_next = False
    for item in items:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        opt = secret_option(item)
        if opt is not None and "=" in item:
            out.append(item.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(redact(item, _searchable(values)))
            mask_next = opt is not None
    return out


def redact_env(env: Mapping[str, Any], values: Sequence[str] = ()) -> Dict[str, Any]:
    """An environment with every secret-named variable's value masked, and ``values`` in the rest."""
    return {k: (MASK if is_secret_name(str(k)) and v not in (None, "") else redact_value(v, _searchable(values)))
            for k, v in env.items()}


def redact_config(c: Any, environ: Mapping[str, str] = os.environ) -> Any:
    """A copy of a plain config fit to print: ``extra_env`` variables named like a secret, ``args.<dest>``
    naming a secret and the values after secret flags in lists are masked whatever their length; every
    known secret value (:func:`config_secret_values`) is masked in every string. What ``clawgym show``,
    ``diff``, ``runs``, ``report`` and ``explain`` print of a config."""
    if not isinstance(c, Mapping):
        return c
    values = _searchable(config_secret_values(c, environ))

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, Mapping):
            out = {}
            for k, v in node.items():
                key = f"{path}.{k}" if path else str(k)
                if path == "extra_env" and is_secret_name(str(k)) and v not in (None, ""):
                    out[k] = MASK
                elif path == "args" and names_secret(str(k)) and not isinstance(v, (bool, list, dict)) \
                        and v not in (None, ""):
                    out[k] = MASK
                else:
                    out[k] = walk(v, key)
            return out
        if isinstance(node, list):
            if all(not isinstance(x, (list, dict)) for x in node):
                return redact_argv(node, values) if node else []
            return [walk(x, path) for x in node]
        if isinstance(node, str):
            return redact(node, values)
        return node

    return walk(c, "")


def redact_text(text: str, c: Any = None, environ: Mapping[str, str] = os.environ) -> str:
    """``text`` with every secret value of ``c`` and the environment masked (:func:`config_secret_values`)."""
    return redact(text, _searchable(config_secret_values(c, environ)))


def redact_overrides(overrides: Sequence[str], values: Sequence[str] = ()) -> List[str]:
    """Hydra overrides fit to print: the value of ``extra_env.<secret name>=`` and ``args.<secret dest>=``
    masked whatever its length, ``values`` masked in the rest."""
    out = []
    for o in overrides:
        key, eq, _value = str(o).partition("=")
        bare = key.lstrip("+~")
        group, _, name = bare.partition(".")
        if eq and ((group == "extra_env" and is_secret_name(name)) or (group == "args" and names_secret(name))):
            out.append(f"{key}={MASK}")
        else:
            out.append(redact(str(o), _searchable(values)))
    return out
