//! Names read from a DER certificate: a short walk of the DER, so that no
//! X.509 parser joins the dependencies for two fields.

/// The subject common name of a DER certificate, if it has one: the API
/// server checks a front-proxy certificate's against its allowed names.
pub fn common_name(certificate: &[u8]) -> Option<String> {
    let (_, mut subject) = names(certificate)?;
    let mut found = None;
    while !subject.is_empty() {
        let (mut set, rest) = der(subject, 0x31)?;
        subject = rest;
        while !set.is_empty() {
            let (attribute, rest) = der(set, SEQUENCE)?;
            set = rest;
            let (oid, value) = der(attribute, 0x06)?;
            if oid == COMMON_NAME_OID {
                let tag = *value.first()?;
                let (text, _) = der(value, tag)?;
                found = Some(String::from_utf8_lossy(text).into_owned());
            }
        }
    }
    found
}

/// The issuer of a DER certificate as it is encoded there (the whole
/// `Name`, tag and length included): what TLS names a CA by when one end
/// tells the other which CAs it trusts (rustls' `DistinguishedName`).
pub fn issuer(certificate: &[u8]) -> Option<&[u8]> {
    names(certificate).map(|(issuer, _)| issuer)
}

/// The issuer (the whole element) and the subject's contents of a DER
/// certificate: Certificate → tbsCertificate → the fields before them.
fn names(certificate: &[u8]) -> Option<(&[u8], &[u8])> {
    let (certificate, _) = der(certificate, SEQUENCE)?;
    let (mut tbs, _) = der(certificate, SEQUENCE)?;
    // [0] version, optional.
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs, 0xa0)?.1;
    }
    let tbs = der(tbs, 0x02)?.1; // serialNumber
    let tbs = der(tbs, SEQUENCE)?.1; // signature
    let after_issuer = der(tbs, SEQUENCE)?.1;
    let issuer = &tbs[..tbs.len() - after_issuer.len()];
    let tbs = der(after_issuer, SEQUENCE)?.1; // validity
    let (subject, _) = der(tbs, SEQUENCE)?;
    Some((issuer, subject))
}

const SEQUENCE: u8 = 0x30;
/// 2.5.4.3.
const COMMON_NAME_OID: &[u8] = &[0x55, 0x04, 0x03];

/// The contents of the DER element at the start of `input` if its tag is
/// `tag`, and what follows it.
fn der(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&first, rest) = input.split_first()?;
    if first != tag {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (len, rest) = if len < 0x80 {
        (usize::from(len), rest)
    } else {
        let octets = usize::from(len & 0x7f);
        if octets == 0 || octets > 4 || rest.len() < octets {
            return None;
        }
        let len = rest[..octets]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[octets..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA named `common_name`: its certificate, and the issuer
    /// that signs with it.
    fn ca(common_name: &str) -> (rcgen::Certificate, rcgen::Issuer<'static, rcgen::KeyPair>) {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, common_name);
        let certificate = ca.self_signed(&key).expect("ca");
        (certificate, rcgen::Issuer::new(ca, key))
    }

    #[test]
    fn the_common_name_is_read_from_the_subject_not_the_issuer() {
        let (ca_cert, issuer) = ca("front-proxy-client");
        let key = rcgen::KeyPair::generate().expect("key");
        let mut leaf =
            rcgen::CertificateParams::new(vec!["x.example".to_string()]).expect("params");
        leaf.distinguished_name
            .push(rcgen::DnType::OrganizationName, "org");
        leaf.distinguished_name
            .push(rcgen::DnType::CommonName, "podprobe-peer");
        let leaf = leaf.signed_by(&key, &issuer).expect("leaf");
        assert_eq!(common_name(leaf.der()).as_deref(), Some("podprobe-peer"));
        assert_eq!(
            common_name(ca_cert.der()).as_deref(),
            Some("front-proxy-client")
        );
        assert_eq!(common_name(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(common_name(&[]), None);
        let mut no_cn = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        no_cn.distinguished_name = rcgen::DistinguishedName::new();
        let no_cn = no_cn.self_signed(&key).expect("cert");
        assert_eq!(common_name(no_cn.der()), None);
    }

    #[test]
    fn the_issuer_is_the_name_of_the_ca_as_tls_sends_it() {
        let (ca_cert, issuer_of) = ca("podprobe-status-api-ca-2");
        let key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["x.example".to_string()])
            .expect("params")
            .signed_by(&key, &issuer_of)
            .expect("leaf");
        // rustls names a trusted CA by its subject, which is the leaf's issuer.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).expect("root");
        assert_eq!(issuer(leaf.der()), Some(roots.subjects()[0].as_ref()));
        assert_eq!(issuer(b"\x30\x84\xff\xff\xff\xff"), None);
        assert_eq!(issuer(&[]), None);
    }
}
