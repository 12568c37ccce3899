//! OpenSSL's names of TLS cipher suites and key exchange groups, by their IANA numbers: what
//! nginx shows in `$ssl_ciphers`, `$ssl_curves` and `$ssl_curve`. The cipher suites are those
//! Debian's OpenSSL 3.0 knows (`openssl ciphers -V ALL:COMPLEMENTOFALL:@SECLEVEL=0`, and the two
//! signalling values), the groups those it names; a number OpenSSL has no name for is shown
//! by nginx in hex.

/// Cipher suites by number, sorted for a binary search.
const CIPHERS: &[(u16, &str)] = &[
    (0x0001, "NULL-MD5"),
    (0x0002, "NULL-SHA"),
    (0x002c, "PSK-NULL-SHA"),
    (0x002d, "DHE-PSK-NULL-SHA"),
    (0x002e, "RSA-PSK-NULL-SHA"),
    (0x002f, "AES128-SHA"),
    (0x0032, "DHE-DSS-AES128-SHA"),
    (0x0033, "DHE-RSA-AES128-SHA"),
    (0x0034, "ADH-AES128-SHA"),
    (0x0035, "AES256-SHA"),
    (0x0038, "DHE-DSS-AES256-SHA"),
    (0x0039, "DHE-RSA-AES256-SHA"),
    (0x003a, "ADH-AES256-SHA"),
    (0x003b, "NULL-SHA256"),
    (0x003c, "AES128-SHA256"),
    (0x003d, "AES256-SHA256"),
    (0x0040, "DHE-DSS-AES128-SHA256"),
    (0x0041, "CAMELLIA128-SHA"),
    (0x0044, "DHE-DSS-CAMELLIA128-SHA"),
    (0x0045, "DHE-RSA-CAMELLIA128-SHA"),
    (0x0046, "ADH-CAMELLIA128-SHA"),
    (0x0067, "DHE-RSA-AES128-SHA256"),
    (0x006a, "DHE-DSS-AES256-SHA256"),
    (0x006b, "DHE-RSA-AES256-SHA256"),
    (0x006c, "ADH-AES128-SHA256"),
    (0x006d, "ADH-AES256-SHA256"),
    (0x0084, "CAMELLIA256-SHA"),
    (0x0087, "DHE-DSS-CAMELLIA256-SHA"),
    (0x0088, "DHE-RSA-CAMELLIA256-SHA"),
    (0x0089, "ADH-CAMELLIA256-SHA"),
    (0x008c, "PSK-AES128-CBC-SHA"),
    (0x008d, "PSK-AES256-CBC-SHA"),
    (0x0090, "DHE-PSK-AES128-CBC-SHA"),
    (0x0091, "DHE-PSK-AES256-CBC-SHA"),
    (0x0094, "RSA-PSK-AES128-CBC-SHA"),
    (0x0095, "RSA-PSK-AES256-CBC-SHA"),
    (0x009c, "AES128-GCM-SHA256"),
    (0x009d, "AES256-GCM-SHA384"),
    (0x009e, "DHE-RSA-AES128-GCM-SHA256"),
    (0x009f, "DHE-RSA-AES256-GCM-SHA384"),
    (0x00a2, "DHE-DSS-AES128-GCM-SHA256"),
    (0x00a3, "DHE-DSS-AES256-GCM-SHA384"),
    (0x00a6, "ADH-AES128-GCM-SHA256"),
    (0x00a7, "ADH-AES256-GCM-SHA384"),
    (0x00a8, "PSK-AES128-GCM-SHA256"),
    (0x00a9, "PSK-AES256-GCM-SHA384"),
    (0x00aa, "DHE-PSK-AES128-GCM-SHA256"),
    (0x00ab, "DHE-PSK-AES256-GCM-SHA384"),
    (0x00ac, "RSA-PSK-AES128-GCM-SHA256"),
    (0x00ad, "RSA-PSK-AES256-GCM-SHA384"),
    (0x00ae, "PSK-AES128-CBC-SHA256"),
    (0x00af, "PSK-AES256-CBC-SHA384"),
    (0x00b0, "PSK-NULL-SHA256"),
    (0x00b1, "PSK-NULL-SHA384"),
    (0x00b2, "DHE-PSK-AES128-CBC-SHA256"),
    (0x00b3, "DHE-PSK-AES256-CBC-SHA384"),
    (0x00b4, "DHE-PSK-NULL-SHA256"),
    (0x00b5, "DHE-PSK-NULL-SHA384"),
    (0x00b6, "RSA-PSK-AES128-CBC-SHA256"),
    (0x00b7, "RSA-PSK-AES256-CBC-SHA384"),
    (0x00b8, "RSA-PSK-NULL-SHA256"),
    (0x00b9, "RSA-PSK-NULL-SHA384"),
    (0x00ba, "CAMELLIA128-SHA256"),
    (0x00bd, "DHE-DSS-CAMELLIA128-SHA256"),
    (0x00be, "DHE-RSA-CAMELLIA128-SHA256"),
    (0x00bf, "ADH-CAMELLIA128-SHA256"),
    (0x00c0, "CAMELLIA256-SHA256"),
    (0x00c3, "DHE-DSS-CAMELLIA256-SHA256"),
    (0x00c4, "DHE-RSA-CAMELLIA256-SHA256"),
    (0x00c5, "ADH-CAMELLIA256-SHA256"),
    (0x00ff, "TLS_EMPTY_RENEGOTIATION_INFO_SCSV"),
    (0x1301, "TLS_AES_128_GCM_SHA256"),
    (0x1302, "TLS_AES_256_GCM_SHA384"),
    (0x1303, "TLS_CHACHA20_POLY1305_SHA256"),
    (0x5600, "TLS_FALLBACK_SCSV"),
    (0xc006, "ECDHE-ECDSA-NULL-SHA"),
    (0xc009, "ECDHE-ECDSA-AES128-SHA"),
    (0xc00a, "ECDHE-ECDSA-AES256-SHA"),
    (0xc010, "ECDHE-RSA-NULL-SHA"),
    (0xc013, "ECDHE-RSA-AES128-SHA"),
    (0xc014, "ECDHE-RSA-AES256-SHA"),
    (0xc015, "AECDH-NULL-SHA"),
    (0xc018, "AECDH-AES128-SHA"),
    (0xc019, "AECDH-AES256-SHA"),
    (0xc01d, "SRP-AES-128-CBC-SHA"),
    (0xc01e, "SRP-RSA-AES-128-CBC-SHA"),
    (0xc01f, "SRP-DSS-AES-128-CBC-SHA"),
    (0xc020, "SRP-AES-256-CBC-SHA"),
    (0xc021, "SRP-RSA-AES-256-CBC-SHA"),
    (0xc022, "SRP-DSS-AES-256-CBC-SHA"),
    (0xc023, "ECDHE-ECDSA-AES128-SHA256"),
    (0xc024, "ECDHE-ECDSA-AES256-SHA384"),
    (0xc027, "ECDHE-RSA-AES128-SHA256"),
    (0xc028, "ECDHE-RSA-AES256-SHA384"),
    (0xc02b, "ECDHE-ECDSA-AES128-GCM-SHA256"),
    (0xc02c, "ECDHE-ECDSA-AES256-GCM-SHA384"),
    (0xc02f, "ECDHE-RSA-AES128-GCM-SHA256"),
    (0xc030, "ECDHE-RSA-AES256-GCM-SHA384"),
    (0xc035, "ECDHE-PSK-AES128-CBC-SHA"),
    (0xc036, "ECDHE-PSK-AES256-CBC-SHA"),
    (0xc037, "ECDHE-PSK-AES128-CBC-SHA256"),
    (0xc038, "ECDHE-PSK-AES256-CBC-SHA384"),
    (0xc039, "ECDHE-PSK-NULL-SHA"),
    (0xc03a, "ECDHE-PSK-NULL-SHA256"),
    (0xc03b, "ECDHE-PSK-NULL-SHA384"),
    (0xc050, "ARIA128-GCM-SHA256"),
    (0xc051, "ARIA256-GCM-SHA384"),
    (0xc052, "DHE-RSA-ARIA128-GCM-SHA256"),
    (0xc053, "DHE-RSA-ARIA256-GCM-SHA384"),
    (0xc056, "DHE-DSS-ARIA128-GCM-SHA256"),
    (0xc057, "DHE-DSS-ARIA256-GCM-SHA384"),
    (0xc05c, "ECDHE-ECDSA-ARIA128-GCM-SHA256"),
    (0xc05d, "ECDHE-ECDSA-ARIA256-GCM-SHA384"),
    (0xc060, "ECDHE-ARIA128-GCM-SHA256"),
    (0xc061, "ECDHE-ARIA256-GCM-SHA384"),
    (0xc06a, "PSK-ARIA128-GCM-SHA256"),
    (0xc06b, "PSK-ARIA256-GCM-SHA384"),
    (0xc06c, "DHE-PSK-ARIA128-GCM-SHA256"),
    (0xc06d, "DHE-PSK-ARIA256-GCM-SHA384"),
    (0xc06e, "RSA-PSK-ARIA128-GCM-SHA256"),
    (0xc06f, "RSA-PSK-ARIA256-GCM-SHA384"),
    (0xc072, "ECDHE-ECDSA-CAMELLIA128-SHA256"),
    (0xc073, "ECDHE-ECDSA-CAMELLIA256-SHA384"),
    (0xc076, "ECDHE-RSA-CAMELLIA128-SHA256"),
    (0xc077, "ECDHE-RSA-CAMELLIA256-SHA384"),
    (0xc094, "PSK-CAMELLIA128-SHA256"),
    (0xc095, "PSK-CAMELLIA256-SHA384"),
    (0xc096, "DHE-PSK-CAMELLIA128-SHA256"),
    (0xc097, "DHE-PSK-CAMELLIA256-SHA384"),
    (0xc098, "RSA-PSK-CAMELLIA128-SHA256"),
    (0xc099, "RSA-PSK-CAMELLIA256-SHA384"),
    (0xc09a, "ECDHE-PSK-CAMELLIA128-SHA256"),
    (0xc09b, "ECDHE-PSK-CAMELLIA256-SHA384"),
    (0xc09c, "AES128-CCM"),
    (0xc09d, "AES256-CCM"),
    (0xc09e, "DHE-RSA-AES128-CCM"),
    (0xc09f, "DHE-RSA-AES256-CCM"),
    (0xc0a0, "AES128-CCM8"),
    (0xc0a1, "AES256-CCM8"),
    (0xc0a2, "DHE-RSA-AES128-CCM8"),
    (0xc0a3, "DHE-RSA-AES256-CCM8"),
    (0xc0a4, "PSK-AES128-CCM"),
    (0xc0a5, "PSK-AES256-CCM"),
    (0xc0a6, "DHE-PSK-AES128-CCM"),
    (0xc0a7, "DHE-PSK-AES256-CCM"),
    (0xc0a8, "PSK-AES128-CCM8"),
    (0xc0a9, "PSK-AES256-CCM8"),
    (0xc0aa, "DHE-PSK-AES128-CCM8"),
    (0xc0ab, "DHE-PSK-AES256-CCM8"),
    (0xc0ac, "ECDHE-ECDSA-AES128-CCM"),
    (0xc0ad, "ECDHE-ECDSA-AES256-CCM"),
    (0xc0ae, "ECDHE-ECDSA-AES128-CCM8"),
    (0xc0af, "ECDHE-ECDSA-AES256-CCM8"),
    (0xcca8, "ECDHE-RSA-CHACHA20-POLY1305"),
    (0xcca9, "ECDHE-ECDSA-CHACHA20-POLY1305"),
    (0xccaa, "DHE-RSA-CHACHA20-POLY1305"),
    (0xccab, "PSK-CHACHA20-POLY1305"),
    (0xccac, "ECDHE-PSK-CHACHA20-POLY1305"),
    (0xccad, "DHE-PSK-CHACHA20-POLY1305"),
    (0xccae, "RSA-PSK-CHACHA20-POLY1305"),
];

/// Key exchange groups by number, sorted: OpenSSL's short names (OpenSSL 3.5's for the
/// post-quantum hybrids, which 3.0 does not know).
const GROUPS: &[(u16, &str)] = &[
    (0x0001, "sect163k1"),
    (0x0002, "sect163r1"),
    (0x0003, "sect163r2"),
    (0x0004, "sect193r1"),
    (0x0005, "sect193r2"),
    (0x0006, "sect233k1"),
    (0x0007, "sect233r1"),
    (0x0008, "sect239k1"),
    (0x0009, "sect283k1"),
    (0x000a, "sect283r1"),
    (0x000b, "sect409k1"),
    (0x000c, "sect409r1"),
    (0x000d, "sect571k1"),
    (0x000e, "sect571r1"),
    (0x000f, "secp160k1"),
    (0x0010, "secp160r1"),
    (0x0011, "secp160r2"),
    (0x0012, "secp192k1"),
    (0x0013, "prime192v1"),
    (0x0014, "secp224k1"),
    (0x0015, "secp224r1"),
    (0x0016, "secp256k1"),
    (0x0017, "prime256v1"),
    (0x0018, "secp384r1"),
    (0x0019, "secp521r1"),
    (0x001a, "brainpoolP256r1"),
    (0x001b, "brainpoolP384r1"),
    (0x001c, "brainpoolP512r1"),
    (0x001d, "X25519"),
    (0x001e, "X448"),
    (0x0100, "ffdhe2048"),
    (0x0101, "ffdhe3072"),
    (0x0102, "ffdhe4096"),
    (0x0103, "ffdhe6144"),
    (0x0104, "ffdhe8192"),
    (0x0201, "MLKEM768"),
    (0x11eb, "SecP256r1MLKEM768"),
    (0x11ec, "X25519MLKEM768"),
];

fn find(table: &'static [(u16, &'static str)], id: u16) -> Option<&'static str> {
    let i = table.binary_search_by_key(&id, |&(n, _)| n).ok()?;
    Some(table[i].1)
}

/// Appends the names of `ids` as nginx lists them, `:`-separated: OpenSSL's name where it has
/// one, else `0x` and the number in four hex digits (`hex` as nginx prints it: `{:04x}`).
fn list(table: &'static [(u16, &'static str)], ids: impl Iterator<Item = u16>, out: &mut Vec<u8>) {
    use std::io::Write as _;
    for (i, id) in ids.enumerate() {
        if i > 0 {
            out.push(b':');
        }
        match find(table, id) {
            Some(name) => out.extend_from_slice(name.as_bytes()),
            None => {
                let _ = write!(out, "0x{id:04x}");
            }
        }
    }
}

/// `$ssl_ciphers`: the cipher suites a client offered, in its order.
pub fn cipher_list(ids: impl Iterator<Item = u16>, out: &mut Vec<u8>) {
    list(CIPHERS, ids, out);
}

/// `$ssl_curves`: the groups a client supports, in its order.
pub fn group_list(ids: impl Iterator<Item = u16>, out: &mut Vec<u8>) {
    list(GROUPS, ids, out);
}

/// `$ssl_curve`: the group a handshake used.
pub fn group_name(id: u16, out: &mut Vec<u8>) {
    list(GROUPS, std::iter::once(id), out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_for_the_search() {
        for table in [CIPHERS, GROUPS] {
            assert!(table.windows(2).all(|w| w[0].0 < w[1].0));
        }
    }

    #[test]
    fn known_by_name_unknown_in_hex() {
        let mut out = Vec::new();
        cipher_list([0x1302, 0xc02c, 0x0a0a, 0x00ff].into_iter(), &mut out);
        assert_eq!(
            out,
            b"TLS_AES_256_GCM_SHA384:ECDHE-ECDSA-AES256-GCM-SHA384:0x0a0a:TLS_EMPTY_RENEGOTIATION_INFO_SCSV"
        );
        out.clear();
        group_list([0x001d, 0x0017, 0x2a2a].into_iter(), &mut out);
        assert_eq!(out, b"X25519:prime256v1:0x2a2a");
    }
}
