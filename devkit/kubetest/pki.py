"""Throwaway credentials for a test control plane: one CA, serving and client certificates, SA keys.

Pure functions returning PEM bytes; nothing here touches the file system or the network.
EC P-256 keys keep minting fast (RSA-2048 generation costs ~100 ms each on a small machine).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)
_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A certificate (or public key) and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA able to issue leaf certificates."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue_server(self, common_name: str, hosts: list[str]) -> KeyPair:
        """A TLS serving certificate whose SANs are ``hosts`` (IP literals become IP SANs)."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(
            x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]),
            ExtendedKeyUsageOID.SERVER_AUTH,
            x509.SubjectAlternativeName(sans),
        )

    def issue_client(self, user: str, groups: list[str] | tuple[str, ...] = ()) -> KeyPair:
        """A client certificate kube-apiserver maps to ``user`` (CN) in ``groups`` (one O each)."""
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, user)]
        attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
        return self._issue(x509.Name(attrs), ExtendedKeyUsageOID.CLIENT_AUTH, None)

    def _issue(
        self, subject: x509.Name, usage: x509.ObjectIdentifier, sans: x509.SubjectAlternativeName | None
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=False,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans is not None:
            builder = builder.add_extension(sans, critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def new_ca(common_name: str = "shardcdc-kubetest-ca") -> CertificateAuthority:
    """A fresh self-signed CA, valid for a week."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _SKEW)
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(cert, key)


def service_account_keys() -> KeyPair:
    """The service-account token signing key pair (``cert_pem`` holds the PEM public key).

    RSA because RS256 is what every token consumer accepts; minted once per control plane.
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return KeyPair(public, _private_pem(key))


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
