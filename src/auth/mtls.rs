//! The identity in a client certificate (mutual TLS, `server.tls.client_auth`
//! in docs/configuration/tls.md): the names a consumer can be read from.
//!
//! rustls verifies the certificate during the handshake (chained to the
//! configured CA, in its validity period, usable for client auth); this
//! module only reads names out of the end-entity certificate, once per
//! connection, into a [`PeerCert`] the connection's requests share. It
//! checks no signature and trusts nothing by itself: a [`PeerCert`] is
//! made only from a certificate rustls has already verified.
//!
//! The names are the first DNS name and the first URI of the subject
//! alternative names, and the subject's first common name. Only names that
//! are text (the DER string types that are ASCII or UTF-8) and that hold no
//! control character are given out: the consumer's name ends up in request
//! headers and log lines, where such a character could forge a field.
//!
//! A leaf: it uses no other module of the gateway, so the server layer may
//! parse certificates with it.

use std::fmt;
use std::str::FromStr;

use x509_parser::certificate::X509Certificate;
use x509_parser::der_parser::ber::Tag;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::FromDer;

/// Which name of a client certificate names its consumer
/// (`consumers.mtls.consumer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CertField {
    /// The first DNS name among the subject alternative names (`san_dns`).
    SanDns,
    /// The first URI among the subject alternative names (`san_uri`), a
    /// SPIFFE ID for instance.
    SanUri,
    /// The subject's first common name (`subject_cn`).
    SubjectCn,
}

impl CertField {
    /// Every field, in the order the config names them.
    pub const ALL: [CertField; 3] = [CertField::SanDns, CertField::SanUri, CertField::SubjectCn];

    /// The field's name in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            CertField::SanDns => "san_dns",
            CertField::SanUri => "san_uri",
            CertField::SubjectCn => "subject_cn",
        }
    }
}

impl fmt::Display for CertField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CertField {
    type Err = String;

    fn from_str(s: &str) -> Result<CertField, String> {
        CertField::ALL
            .into_iter()
            .find(|field| field.as_str() == s)
            .ok_or_else(|| {
                format!("`{s}` is not a certificate field: expected `san_dns`, `san_uri` or `subject_cn`")
            })
    }
}

/// Why a certificate's names could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot read the client certificate: {0}")]
pub struct CertError(String);

/// The names of a verified client certificate, read once per connection.
///
/// Each is the first entry of its kind, kept whether or not it is usable,
/// so that an unusable first name is never passed over for a later one:
/// [`PeerCert::name`] then has no name to give rather than another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    /// The first DNS name of the subject alternative names: `None` if
    /// there is none, `Some(None)` if it is not text.
    san_dns: Option<Option<String>>,
    /// The first URI of the subject alternative names, likewise.
    san_uri: Option<Option<String>>,
    /// The subject's first common name, likewise.
    subject_cn: Option<Option<String>>,
}

impl PeerCert {
    /// The names in `der`, one X.509 certificate in DER with nothing after
    /// it. Fails on a certificate x509-parser cannot read, or whose subject
    /// alternative names extension is malformed or repeated.
    pub fn from_der(der: &[u8]) -> Result<PeerCert, CertError> {
        let (rest, cert) =
            X509Certificate::from_der(der).map_err(|e| CertError(format!("not X.509: {e}")))?;
        if !rest.is_empty() {
            return Err(CertError(format!(
                "{} bytes after the certificate",
                rest.len()
            )));
        }
        let mut names = PeerCert {
            subject_cn: cert
                .subject()
                .iter_common_name()
                .next()
                .map(|cn| cn.as_str().ok().map(str::to_owned)),
            san_dns: None,
            san_uri: None,
        };
        let san = cert
            .subject_alternative_name()
            .map_err(|e| CertError(format!("subject alternative names: {e}")))?;
        for name in san.iter().flat_map(|san| &san.value.general_names) {
            // The context tags of dNSName [2] and uniformResourceIdentifier
            // [6] (RFC 5280 4.2.1.6), for entries x509-parser could not read
            // as text.
            let (slot, text) = match name {
                GeneralName::DNSName(text) => (&mut names.san_dns, Some(*text)),
                GeneralName::URI(text) => (&mut names.san_uri, Some(*text)),
                GeneralName::Invalid(Tag(2), _) => (&mut names.san_dns, None),
                GeneralName::Invalid(Tag(6), _) => (&mut names.san_uri, None),
                _ => continue,
            };
            slot.get_or_insert_with(|| text.map(str::to_owned));
        }
        Ok(names)
    }

    /// The name `field` reads: the first subject alternative name of that
    /// kind, or the first common name; `None` when the certificate has
    /// none, or when that first one is empty, not text, or holds a control
    /// character.
    pub fn name(&self, field: CertField) -> Option<&str> {
        let slot = match field {
            CertField::SanDns => &self.san_dns,
            CertField::SanUri => &self.san_uri,
            CertField::SubjectCn => &self.subject_cn,
        };
        slot.as_ref()?
            .as_deref()
            .filter(|name| !name.is_empty() && !name.chars().any(char::is_control))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::string::Ia5String;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    /// The DER of the attribute type organizationName (2.5.4.10) and of
    /// commonName (2.5.4.3): the same length, so one can replace the other.
    const ORGANIZATION: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x0a];
    const COMMON_NAME: [u8; 5] = [0x06, 0x03, 0x55, 0x04, 0x03];

    /// A self-signed certificate with these subject alternative names and
    /// up to two common names, as DER. rcgen writes one attribute of each
    /// type: a second common name is written as the organization, whose
    /// type is then made a common name (no signature is checked here).
    fn cert(sans: Vec<SanType>, cns: &[&str]) -> Vec<u8> {
        let mut params = CertificateParams::default();
        params.subject_alt_names = sans;
        params.distinguished_name = rcgen::DistinguishedName::new();
        let types = [DnType::CommonName, DnType::OrganizationName];
        assert!(cns.len() <= types.len());
        for (cn, kind) in cns.iter().zip(types) {
            params.distinguished_name.push(kind, *cn);
        }
        let key = KeyPair::generate().unwrap();
        let mut der = params.self_signed(&key).unwrap().der().to_vec();
        let mut at = 0;
        while let Some(i) = der[at..].windows(5).position(|w| w == ORGANIZATION) {
            der[at + i..at + i + 5].copy_from_slice(&COMMON_NAME);
            at += i + 5;
        }
        der
    }

    fn dns(name: &str) -> SanType {
        SanType::DnsName(Ia5String::try_from(name).unwrap())
    }

    fn uri(name: &str) -> SanType {
        SanType::URI(Ia5String::try_from(name).unwrap())
    }

    fn names(cert: &PeerCert) -> [Option<&str>; 3] {
        CertField::ALL.map(|field| cert.name(field))
    }

    #[test]
    fn each_field_reads_the_first_name_of_its_kind() {
        let der = cert(
            vec![
                uri("spiffe://example.org/billing"),
                dns("billing.internal"),
                SanType::IpAddress([10, 0, 0, 1].into()),
                dns("second.internal"),
                uri("spiffe://example.org/other"),
            ],
            &["billing-service", "second-cn"],
        );
        let (_, parsed) = X509Certificate::from_der(&der).unwrap();
        assert_eq!(parsed.subject().iter_common_name().count(), 2);
        let peer = PeerCert::from_der(&der).unwrap();
        assert_eq!(
            names(&peer),
            [
                Some("billing.internal"),
                Some("spiffe://example.org/billing"),
                Some("billing-service"),
            ]
        );
    }

    #[test]
    fn a_certificate_without_a_kind_of_name_has_none_of_it() {
        let only_cn = PeerCert::from_der(&cert(vec![], &["just-a-cn"])).unwrap();
        assert_eq!(names(&only_cn), [None, None, Some("just-a-cn")]);
        let only_dns = PeerCert::from_der(&cert(vec![dns("a.example")], &[])).unwrap();
        assert_eq!(names(&only_dns), [Some("a.example"), None, None]);
    }

    #[test]
    fn a_common_name_that_is_not_text_is_not_a_name() {
        // A BMPString (UTF-16): not one of the string forms read as text.
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            DnType::CommonName,
            rcgen::DnValue::BmpString(rcgen::string::BmpString::try_from("bmp").unwrap()),
        );
        let key = KeyPair::generate().unwrap();
        let der = params.self_signed(&key).unwrap().der().to_vec();
        assert_eq!(
            PeerCert::from_der(&der).unwrap().name(CertField::SubjectCn),
            None
        );
    }

    #[test]
    fn a_first_name_with_a_control_character_is_not_passed_over() {
        let der = cert(
            vec![dns("evil\r\nx-consumer: admin"), dns("fine.example")],
            &["tab\there", "fine"],
        );
        let peer = PeerCert::from_der(&der).unwrap();
        assert_eq!(names(&peer), [None, None, None]);
        let empty = PeerCert::from_der(&cert(vec![], &[""])).unwrap();
        assert_eq!(empty.name(CertField::SubjectCn), None);
    }

    #[test]
    fn a_first_name_that_is_not_text_is_not_passed_over() {
        // x509-parser reads a name that is not UTF-8 as an invalid entry:
        // the DER's "zzzz" made invalid (no signature is checked here).
        let der = cert(
            vec![
                dns("zzzz.example"),
                dns("fine.example"),
                uri("zzzz:x"),
                uri("urn:fine"),
            ],
            &["cn"],
        );
        let mut patched = der.clone();
        let mut at = 0;
        while let Some(i) = patched[at..].windows(4).position(|w| w == b"zzzz") {
            patched[at + i] = 0xff;
            at += i + 4;
        }
        assert!(at > 0, "the names are in the DER");
        let peer = PeerCert::from_der(&patched).unwrap();
        assert_eq!(names(&peer), [None, None, Some("cn")]);
        let intact = PeerCert::from_der(&der).unwrap();
        assert_eq!(
            names(&intact),
            [Some("zzzz.example"), Some("zzzz:x"), Some("cn")]
        );
    }

    #[test]
    fn what_is_not_one_certificate_is_refused() {
        let der = cert(vec![dns("a.example")], &["a"]);
        assert!(PeerCert::from_der(&der[..der.len() - 1]).is_err());
        assert!(PeerCert::from_der(b"not a certificate").is_err());
        let mut trailing = der.clone();
        trailing.push(0);
        let error = PeerCert::from_der(&trailing).unwrap_err();
        assert_eq!(
            error.to_string(),
            "cannot read the client certificate: 1 bytes after the certificate"
        );
    }

    #[test]
    fn fields_read_and_print_by_their_config_names() {
        for field in CertField::ALL {
            assert_eq!(field.to_string().parse::<CertField>(), Ok(field));
            let quoted = format!("\"{field}\"");
            assert_eq!(serde_json::from_str::<CertField>(&quoted).unwrap(), field);
        }
        assert_eq!(CertField::SanDns.to_string(), "san_dns");
        assert_eq!(CertField::SanUri.to_string(), "san_uri");
        assert_eq!(CertField::SubjectCn.to_string(), "subject_cn");
        let error = "SAN_DNS".parse::<CertField>().unwrap_err();
        assert!(
            error.contains("`san_dns`, `san_uri` or `subject_cn`"),
            "{error}"
        );
        assert!(serde_json::from_str::<CertField>("\"cn\"").is_err());
    }
}
