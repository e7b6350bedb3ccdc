#!/usr/bin/env python3
"""Writes lan_accept.json, the LAN accept statement vectors (README.md), with Python's
`cryptography` package: independent of the Go code the vectors check. Keys, wires and item ids
come from the 0.5 vector set (the copy beside this directory) (alpha, beta and a third key of keys.json; an envelope wire
of relay_accept.json; a receipt wire of receipt.json). Run from this directory:
python3 lan_accept.py > lan_accept.json"""
import base64, hashlib, json, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives import serialization

def key(seed_b64):
    k = Ed25519PrivateKey.from_private_bytes(base64.b64decode(seed_b64))
    pub = k.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return k, base64.b64encode(pub).decode()

def canonical(o):
    # Every key and string here is plain ASCII: sorted keys and no whitespace are canonical.
    return json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False)

def sign(k, s):
    return base64.b64encode(k.sign(s.encode())).decode()

ALPHA = "cpSvM9EeBH4U8xp2w40Err6TZANeiBdqn1TQC4aj9Ks="
BETA = "IgyUArN1Flej0R95595Za6EnYN/NnHEX1y7ev+cGedg="
OTHER = "N5RZfPeIoIksRKtMOdtIjPWwvApHzKKg0O3BNNklf08="

ra = json.load(open("../agentmbx-0.5/relay_accept.json"))["cases"][0]["items"][0]
rc = json.load(open("../agentmbx-0.5/receipt.json"))["cases"][0]

cases = []
def positive(name, target_seed, sender_seed, item_id, wire):
    tk, tpub = key(target_seed)
    _, spub = key(sender_seed)
    h = hashlib.sha256(wire.encode()).hexdigest()
    st = {"v": 1, "type": "lan-accept", "target_pubkey": tpub, "sender_pubkey": spub, "item_id": item_id, "wire_hash": h}
    si = canonical(st)
    c = {"name": name, "target_seed_b64": target_seed, "target_pubkey": tpub, "sender_pubkey": spub,
         "item_id": item_id, "wire": wire, "wire_sha256": h, "statement": st, "signing_input": si,
         "sig": sign(tk, si), "expect": "valid"}
    cases.append(c)
    return c

env = positive("envelope delivered by alpha to beta", BETA, ALPHA, ra["item_id"], ra["targets"][0]["wire"])
positive("receipt delivered by beta to alpha", ALPHA, BETA, rc["item_id"], rc["wire"])

ok, okpub = key(OTHER)
bk, bpub = key(BETA)
def negative(name, why, answer, sig, **expect):
    c = {"name": name, "expect": "invalid", "error": why,
         "pinned_pubkey": expect.get("pinned", env["target_pubkey"]),
         "own_pubkey": expect.get("own", env["sender_pubkey"]),
         "item_id": expect.get("item", env["item_id"]),
         "wire_sha256": expect.get("hash", env["wire_sha256"]),
         "answer_statement": answer, "answer_sig": sig}
    cases.append(c)

st = env["statement"]
negative("signed by another key", "signature", st, sign(ok, env["signing_input"]))
forged = dict(st, target_pubkey=okpub)
negative("another key's own statement", "target", forged, sign(ok, canonical(forged)))
negative("statement for another sender", "sender", st, env["sig"], own=okpub)
negative("statement for another item", "item", st, env["sig"], item="01KKNTQ2CN9WJ3MR4Q1P12F02V")
negative("statement for other wire bytes", "wire_hash", st, env["sig"], hash=hashlib.sha256(b"other").hexdigest())
moved = dict(st, item_id="01KKNTQ2CN9WJ3MR4Q1P12F02V")
negative("item changed after signing", "signature", moved, env["sig"], item=moved["item_id"])
relay = dict(st, type="relay-accept")
negative("a relay-accept type signed by the peer key", "malformed", relay, sign(bk, canonical(relay)))
negative("statement without signature", "malformed", st, "")
negative("no statement, no signature (a 0.5.x answer)", "missing", None, "")

json.dump({
    "source": "agentmbx's own vectors: lan_accept.py (Python cryptography), not produced by AgentMBX 0.5.x",
    "family": "lan_accept",
    "set": "agentmbx",
    "notes": [
        "LAN accept statement (docs/protocol.md): statement = {v:1, type:'lan-accept', target_pubkey, sender_pubkey, item_id, wire_hash}; sig = base64 Ed25519 by the target's host key over canonical(statement) (signing_input). wire_hash = lowercase hex SHA-256 of the exact item bytes (wire is their UTF-8 text).",
        "Positive cases: signing with target_seed_b64 must give sig byte for byte; the sender's check with pinned = target_pubkey, own = sender_pubkey, item_id and wire_sha256 accepts the statement.",
        "Negative cases: the sender's check with pinned_pubkey, own_pubkey, item_id and wire_sha256 refuses answer_statement/answer_sig; error names the stage (missing, malformed, target, sender, item, wire_hash, signature). answer_statement null means the answer had none."
    ],
    "cases": cases,
}, sys.stdout, indent=1, ensure_ascii=False)
print()
