//! Which partition a partition key lands on: the Event Hubs gateway's mapping, so that events sent
//! with a key go to the same partition locally as in Azure. The service hashes the key's UTF-8
//! bytes with Bob Jenkins' lookup3 (`hashlittle2`, both seeds 0), folds the two halves into a
//! 16-bit signed value and takes its absolute remainder by the partition count — the same
//! algorithm the .NET and Java SDKs' buffered producers reproduce.

/// The partition index for `key` among `partitions` partitions.
pub fn partition_for_key(key: &str, partitions: usize) -> usize {
    let hash = hash_code(key) as i32;
    (hash % partitions as i32).unsigned_abs() as usize
}

/// The 16-bit hash the gateway computes for a key.
pub fn hash_code(key: &str) -> i16 {
    let (c, b) = hashlittle2(key.as_bytes(), 0, 0);
    (c ^ b) as u16 as i16
}

fn hashlittle2(data: &[u8], seed1: u32, seed2: u32) -> (u32, u32) {
    let initial = 0xdead_beef_u32
        .wrapping_add(data.len() as u32)
        .wrapping_add(seed1);
    let (mut a, mut b, mut c) = (initial, initial, initial.wrapping_add(seed2));
    let word = |bytes: &[u8]| u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    let mut rest = data;
    while rest.len() > 12 {
        a = a.wrapping_add(word(&rest[0..]));
        b = b.wrapping_add(word(&rest[4..]));
        c = c.wrapping_add(word(&rest[8..]));
        mix(&mut a, &mut b, &mut c);
        rest = &rest[12..];
    }
    if rest.is_empty() {
        return (c, b);
    }
    // The tail, zero-padded to 12 bytes, added as three little-endian words.
    let mut tail = [0u8; 12];
    tail[..rest.len()].copy_from_slice(rest);
    a = a.wrapping_add(word(&tail[0..]));
    b = b.wrapping_add(word(&tail[4..]));
    c = c.wrapping_add(word(&tail[8..]));
    finish(&mut a, &mut b, &mut c);
    (c, b)
}

fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c);
    *a ^= c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a);
    *b ^= a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b);
    *c ^= b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(14));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(11));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(25));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(16));
    *a ^= *c;
    *a = a.wrapping_sub(c.rotate_left(4));
    *b ^= *a;
    *b = b.wrapping_sub(a.rotate_left(14));
    *c ^= *b;
    *c = c.wrapping_sub(b.rotate_left(24));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hash codes the Azure SDK for .NET pins for the service's algorithm.
    #[test]
    fn matches_the_services_hash_codes() {
        for (key, expected) in [
            ("7", -15263),
            ("131", 30562),
            ("7149583486996073602", 12977),
            ("FWfAT", -22341),
            ("sOdeEAsyQoEuEFPGerWO", -6503),
            ("!c*_!I@1^c", 15372),
            ("p4*!jioeO/z-!-;w:dh", -3104),
            ("$0cb", 26269),
            ("-4189260826195535198", 453),
        ] {
            assert_eq!(hash_code(key), expected, "key {key}");
        }
    }

    #[test]
    fn spreads_keys_over_every_partition_and_stays_in_range() {
        let mut seen = [false; 16];
        for home in 0..1_000 {
            let p = partition_for_key(&format!("home-{home:06}"), 16);
            seen[p] = true;
        }
        assert!(seen.iter().all(|s| *s));
        assert_eq!(partition_for_key("7", 1), 0);
    }
}
