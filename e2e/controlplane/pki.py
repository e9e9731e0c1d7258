"""Certificates and keys for a throwaway local control plane.

One CA signs the apiserver's serving certificate and every client certificate;
Kubernetes maps a client certificate's CN to the user name and its O fields to
groups, which is how the admin (system:masters), the controller-manager and the
scheduler identify themselves. ECDSA P-256 keys keep generation instant.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=2)
# Backdated so that small clock differences never make a fresh cert "not yet valid".
BACKDATE = dt.timedelta(hours=1)


@dataclass(frozen=True)
class CertPair:
    cert: Path
    key: Path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey, *, ca: bool,
             cert_sign: bool) -> x509.CertificateBuilder:
    """What the CA and every leaf share: names, serial, validity window, basic constraints, key usage."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=cert_sign, crl_sign=cert_sign,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
    )


class CertificateAuthority:
    """A CA kept in memory and on disk; issues serving and client certificates."""

    def __init__(self, directory: Path, common_name: str = "pdserve-local-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = _new_key()
        name = _name(common_name)
        self._cert = (
            _builder(name, name, self._key.public_key(), ca=True, cert_sign=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.pair = CertPair(directory / "ca.crt", directory / "ca.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self._key, self.pair.key)

    def _issue(
        self,
        stem: str,
        subject: x509.Name,
        usage: ExtendedKeyUsageOID,
        sans: list[x509.GeneralName] | None = None,
    ) -> CertPair:
        key = _new_key()
        builder = (
            _builder(subject, self._cert.subject, key.public_key(), ca=False, cert_sign=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        pair = CertPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def issue_server(self, stem: str, common_name: str, dns: list[str], ips: list[str]) -> CertPair:
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        return self._issue(stem, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def issue_client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> CertPair:
        if not user:
            raise ValueError("a client certificate needs a non-empty user name")
        return self._issue(stem, _name(user, groups), ExtendedKeyUsageOID.CLIENT_AUTH)


def write_service_account_keys(directory: Path) -> CertPair:
    """Key pair the apiserver signs service-account tokens with (cert = public key PEM)."""
    key = _new_key()
    pair = CertPair(directory / "sa.pub", directory / "sa.key")
    _write_key(key, pair.key)
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pair
