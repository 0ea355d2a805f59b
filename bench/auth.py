"""What checking a bearer credential costs (issue #40): an API key against a bearer JWT whose
issuer key is cached, as callgrind counts the instructions of `Authenticator.caller(header)`
plus the scope check every route makes (`Caller.require`), the whole of what a request pays
for who it is from.

Each kind runs in a process of its own under `valgrind --tool=callgrind`, N checks in one
event loop, at two N; the difference of the two totals over the difference of the Ns is the
cost of one check, start-up and imports cancelled out. Keys are made and tokens signed in this
(outer) process, so the measured ones hold no key generation and no signing (both random in
their instruction counts); PYTHONHASHSEED is fixed. A wall-time figure per check (best of 5
rounds, not under valgrind) is shown beside it: it moves with the shared machine's load.

    python -m bench.auth [--low 200] [--high 2200] [--quick]

Kinds: off (auth off), key (two API keys, the second offered), key-beside-oidc (the same with
an issuer set), token (an RS256 token sent again: verified once, then remembered),
verify-rs256 and verify-es256 (every check verifies the signature: a token seen for the first
time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import ROOT, fmt, machine, machine_line, say, table, write_results

KINDS = ("off", "key", "key-beside-oidc", "token", "verify-rs256", "verify-es256")
ISSUER = "https://issuer.bench.test/realms/bench"
AUDIENCE = "finishline"
KEYS = ["first-key-of-the-bench", "second-key-of-the-bench"]


def material() -> dict[str, Any]:
    """A JWKS of one RSA and one EC key, and a token signed by each (outer process only)."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    jwks = {
        "keys": [
            {**RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True), "kid": "r1"},
            {**ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True), "kid": "e1"},
        ]
    }
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 86_400}
    claims["scope"] = "openid finishline:read finishline:write"
    return {
        "jwks": jwks,
        "RS256": jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "r1"}),
        "ES256": jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "e1"}),
    }


def checker(kind: str, stuff: dict[str, Any]) -> tuple[Any, str]:
    """The authenticator of `kind` and the Authorization header it is sent."""
    from app.identity.bearer import Authenticator

    if kind == "off":
        return Authenticator(api_keys=[]), ""
    if kind == "key":
        return Authenticator(api_keys=KEYS), f"Bearer {KEYS[1]}"
    from app.identity.discovery import IssuerDocuments
    from app.identity.jwks import IssuerKeys
    from app.identity.tokens import TokenVerifier

    keys = IssuerKeys(IssuerDocuments(ISSUER), refresh_s=60, max_age_s=3600)
    keys.accept(stuff["jwks"])
    verifier = TokenVerifier(
        keys, issuer=ISSUER, audience=AUDIENCE, cache_size=4096 if kind == "token" else 0
    )
    token = KEYS[1] if kind == "key-beside-oidc" else stuff["ES256" if "es256" in kind else "RS256"]
    return Authenticator(api_keys=KEYS, tokens=verifier), f"Bearer {token}"


async def checks(kind: str, stuff: dict[str, Any], n: int) -> float:
    """`n` checks of `kind`; the wall time of each, in µs."""
    from app.identity.caller import Access

    authenticator, header = checker(kind, stuff)
    await authenticator.caller(header)  # a first check: imports, the token remembered
    started = time.perf_counter()
    for _ in range(n):
        (await authenticator.caller(header)).require(Access.READ)
    return (time.perf_counter() - started) / max(n, 1) * 1e6


def counted(kind: str, n: int, stuff_path: Path, work: Path) -> int:
    """Instructions of a whole process making `n` checks of `kind`, under callgrind."""
    out = work / f"callgrind.{kind}.{n}"
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT)}
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    command += [sys.executable, "-m", "bench.auth", "--inner", kind, str(n), str(stuff_path)]
    subprocess.run(command, check=True, cwd=ROOT, env=env, capture_output=True)
    for line in out.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no totals in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--low", type=int, default=200)
    parser.add_argument("--high", type=int, default=2200)
    parser.add_argument("--quick", action="store_true", help="fewer checks (--high 700)")
    parser.add_argument(
        "--kinds", default=",".join(KINDS), help="comma-separated, of " + ", ".join(KINDS)
    )
    parser.add_argument("--inner", nargs=3, metavar=("KIND", "N", "MATERIAL"))
    args = parser.parse_args()
    if args.quick:
        args.high = min(args.high, 700)
    if args.inner:
        kind, n, path = args.inner
        asyncio.run(checks(kind, json.loads(Path(path).read_text()), int(n)))
        return
    work = Path(tempfile.mkdtemp(prefix="finishline-auth-"))
    stuff = material()
    stuff_path = work / "material.json"
    stuff_path.write_text(json.dumps(stuff))
    rows: dict[str, dict[str, float]] = {}
    for kind in args.kinds.split(","):
        low = counted(kind, args.low, stuff_path, work)
        high = counted(kind, args.high, stuff_path, work)
        n = 5000 if "verify" not in kind else 500
        walls = [asyncio.run(checks(kind, stuff, n)) for _ in range(5)]
        rows[kind] = {"instructions": (high - low) / (args.high - args.low), "us": min(walls)}
        say(f"{kind}: {rows[kind]['instructions']:,.0f} instructions, {min(walls):.2f} µs")
    load = os.getloadavg()[0]
    write_results("auth", report(rows, args.low, args.high, load), {"rows": rows, **machine()})


ABOUT = {
    "off": "auth off (no key, no issuer): the caller is anyone",
    "key": "an API key (two configured, the second offered)",
    "key-beside-oidc": "the same API key, an OIDC issuer set too",
    "token": "an RS256 token sent again (verified once, then remembered)",
    "verify-rs256": "an RS256 token seen for the first time (signature verified)",
    "verify-es256": "an ES256 token seen for the first time (signature verified)",
}


def report(rows: dict[str, dict[str, float]], low: int, high: int, load: float) -> str:
    key = rows["key"]["instructions"] if "key" in rows else float("nan")
    body = table(
        ["check", "instructions", "× API key", "µs (wall, best of 5)"],
        [
            [ABOUT[k], fmt(r["instructions"], 0), fmt(r["instructions"] / key, 2), fmt(r["us"], 2)]
            for k, r in rows.items()
        ],
    )
    return (
        "# What checking a bearer credential costs (bench/auth.py)\n\n"
        + machine_line(machine())
        + "\n\n"
        + f"`Authenticator.caller(header)` and the route's scope check, per check: callgrind's "
        f"instruction counts of a process making {high} checks minus one making {low}, over "
        f"{high - low}; wall time per check beside, best of 5 rounds (it moves with the load: "
        f"the 1-minute load average was {load:.1f} at the end).\n\n" + body + "\n"
    )


if __name__ == "__main__":
    main()
