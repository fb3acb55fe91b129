//! Just enough DER to find a public key: the SubjectPublicKeyInfo of a
//! certificate, the algorithm and key bits of an SPKI, the modulus and
//! exponent of a PKCS#1 RSA public key. Framing only; no cryptography.

/// `SEQUENCE`.
const SEQUENCE: u8 = 0x30;
/// `INTEGER`.
const INTEGER: u8 = 0x02;
/// `BIT STRING`.
const BIT_STRING: u8 = 0x03;
/// `OBJECT IDENTIFIER`.
const OID: u8 = 0x06;
/// `[0] EXPLICIT`: a certificate's version.
const VERSION: u8 = 0xa0;

/// rsaEncryption, 1.2.840.113549.1.1.1.
pub(crate) const OID_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// id-ecPublicKey, 1.2.840.10045.2.1.
pub(crate) const OID_EC: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// prime256v1 (P-256), 1.2.840.10045.3.1.7.
pub(crate) const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// secp384r1 (P-384), 1.3.132.0.34.
pub(crate) const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
/// id-Ed25519, 1.3.101.112.
pub(crate) const OID_ED25519: &[u8] = &[0x2b, 0x65, 0x70];

/// Reads DER elements one after another from a slice.
struct Reader<'a> {
    rest: &'a [u8],
}

/// One element: its tag, its contents, and the whole encoding.
struct Element<'a> {
    tag: u8,
    contents: &'a [u8],
    whole: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(input: &'a [u8]) -> Self {
        Reader { rest: input }
    }

    /// The next element (definite lengths up to 4 length bytes).
    fn next(&mut self) -> Result<Element<'a>, &'static str> {
        let input = self.rest;
        let (&tag, after_tag) = input.split_first().ok_or("truncated DER")?;
        let (&first, mut after_len) = after_tag.split_first().ok_or("truncated DER")?;
        let len = if first < 0x80 {
            usize::from(first)
        } else {
            let count = usize::from(first & 0x7f);
            if count == 0 || count > 4 || after_len.len() < count {
                return Err("bad DER length");
            }
            let (bytes, rest) = after_len.split_at(count);
            after_len = rest;
            bytes.iter().fold(0usize, |n, &b| (n << 8) | usize::from(b))
        };
        if after_len.len() < len {
            return Err("truncated DER");
        }
        let header = input.len() - after_len.len();
        let (whole, rest) = input.split_at(header + len);
        self.rest = rest;
        Ok(Element {
            tag,
            contents: &whole[header..],
            whole,
        })
    }

    /// The next element, which must have tag `tag`; its contents.
    fn expect(&mut self, tag: u8, what: &'static str) -> Result<&'a [u8], &'static str> {
        let element = self.next()?;
        if element.tag == tag {
            Ok(element.contents)
        } else {
            Err(what)
        }
    }
}

/// The parts of a SubjectPublicKeyInfo this module's callers need.
pub(crate) struct Spki<'a> {
    /// The algorithm's OID (contents bytes).
    pub(crate) algorithm: &'a [u8],
    /// The parameters' OID when they are one (an EC key's curve).
    pub(crate) curve: Option<&'a [u8]>,
    /// The key bits (the BIT STRING's contents past its unused-bits byte).
    pub(crate) key: &'a [u8],
}

/// Read a DER SubjectPublicKeyInfo (RFC 5280 §4.1).
pub(crate) fn spki(der: &[u8]) -> Result<Spki<'_>, &'static str> {
    let mut outer = Reader::new(der);
    let mut fields = Reader::new(outer.expect(SEQUENCE, "not a SubjectPublicKeyInfo")?);
    let mut algorithm_id = Reader::new(fields.expect(SEQUENCE, "not a SubjectPublicKeyInfo")?);
    let algorithm = algorithm_id.expect(OID, "not a SubjectPublicKeyInfo")?;
    let curve = match algorithm_id.next() {
        Ok(element) if element.tag == OID => Some(element.contents),
        _ => None,
    };
    let bits = fields.expect(BIT_STRING, "not a SubjectPublicKeyInfo")?;
    match bits.split_first() {
        Some((0, key)) => Ok(Spki {
            algorithm,
            curve,
            key,
        }),
        _ => Err("the public key is not a whole number of bytes"),
    }
}

/// The SubjectPublicKeyInfo (whole encoding) of a DER X.509 certificate.
pub(crate) fn certificate_spki(der: &[u8]) -> Result<&[u8], &'static str> {
    let mut outer = Reader::new(der);
    let mut certificate = Reader::new(outer.expect(SEQUENCE, "not a certificate")?);
    let mut tbs = Reader::new(certificate.expect(SEQUENCE, "not a certificate")?);
    let mut element = tbs.next()?;
    if element.tag == VERSION {
        element = tbs.next()?;
    }
    // serialNumber (read above), signature, issuer, validity, subject, then
    // subjectPublicKeyInfo.
    if element.tag != INTEGER {
        return Err("not a certificate");
    }
    for _ in 0..4 {
        tbs.expect(SEQUENCE, "not a certificate")?;
    }
    let spki = tbs.next()?;
    if spki.tag != SEQUENCE {
        return Err("not a certificate");
    }
    Ok(spki.whole)
}

/// The modulus and public exponent of a PKCS#1 RSAPublicKey, big-endian
/// without leading zeros.
pub(crate) fn rsa_public_key(der: &[u8]) -> Result<(&[u8], &[u8]), &'static str> {
    let mut outer = Reader::new(der);
    let mut fields = Reader::new(outer.expect(SEQUENCE, "not an RSA public key")?);
    let n = fields.expect(INTEGER, "not an RSA public key")?;
    let e = fields.expect(INTEGER, "not an RSA public key")?;
    Ok((strip_zeros(n), strip_zeros(e)))
}

/// `bytes` without leading zero bytes.
pub(crate) fn strip_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != 0).unwrap_or(bytes.len());
    &bytes[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_form_lengths_and_truncation() {
        // A SEQUENCE of 200 zero bytes with a one-byte long-form length.
        let mut der = vec![SEQUENCE, 0x81, 200];
        der.extend([0u8; 200]);
        let mut r = Reader::new(&der);
        let e = r.next().unwrap();
        assert_eq!(
            (e.tag, e.contents.len(), e.whole.len()),
            (SEQUENCE, 200, 203)
        );
        assert!(r.rest.is_empty());
        assert_eq!(Reader::new(&der[..150]).next().err(), Some("truncated DER"));
        assert_eq!(
            Reader::new(&[SEQUENCE, 0x80]).next().err(),
            Some("bad DER length")
        );
        assert_eq!(Reader::new(&[SEQUENCE]).next().err(), Some("truncated DER"));
    }

    #[test]
    fn leading_zeros_go() {
        assert_eq!(strip_zeros(&[0, 0, 1, 0]), &[1, 0]);
        assert_eq!(strip_zeros(&[0]), &[] as &[u8]);
    }
}
