//! A test PKI: a CA made with rcgen and the certificates it issues, as PEM
//! files in a temp dir, for the TLS listeners and `https://` upstreams.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::CertificateDer;

use super::gateway::temp_dir;

/// A test CA and the certificates it issues, as files in a temp dir.
pub struct Pki {
    pub dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

impl Drop for Pki {
    /// The certificates go with the PKI: tests leave nothing in the temp dir.
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Pki {
    pub fn new() -> Pki {
        let dir = temp_dir("tls");
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tollgate test CA");
        let cert = params.self_signed(&key).unwrap();
        std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
        Pki {
            dir,
            issuer: Issuer::new(params, key),
        }
    }

    pub fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A certificate for `names` (DNS names or IPs) signed by the CA, written
    /// as `<file>.pem` and `<file>.key` (PKCS#8); returns (cert, key).
    pub fn issue(&self, names: &[&str], file: &str) -> (PathBuf, PathBuf) {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        self.issue_params(CertificateParams::new(names).unwrap(), file)
    }

    /// A certificate of `params` (any SANs and subject, e.g. a client
    /// certificate's URI SAN and CN) signed by the CA, written like
    /// [`Pki::issue`]'s; returns (cert, key).
    pub fn issue_params(&self, params: CertificateParams, file: &str) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let (c, k) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    /// The CA as a root store.
    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der_of(&self.ca())).unwrap();
        roots
    }
}

/// The first certificate of a PEM file, as DER.
pub fn der_of(pem: &Path) -> CertificateDer<'static> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_file_iter(pem)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
}
