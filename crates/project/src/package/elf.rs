//! What a Linux executable needs of the system it runs on, read from its ELF headers: the
//! machine it is for, the shared libraries it names (`DT_NEEDED`) and the newest glibc symbol
//! version it asks for (the `GLIBC_x.y` entries of `.gnu.version_r`). A binary linked on a newer
//! system than the Functions image fails there with "GLIBC_2.xx not found"; this reads the
//! answer before deploying. Pure: bytes in, facts out.

use std::collections::BTreeSet;

/// A glibc version, `(major, minor)`.
pub type GlibcVersion = (u32, u32);

/// What an executable needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needs {
    /// x86-64 (`EM_X86_64`).
    pub x86_64: bool,
    /// Shared libraries by name; empty for a static executable.
    pub libraries: BTreeSet<String>,
    /// Every `GLIBC_x.y` version asked for.
    pub glibc: BTreeSet<GlibcVersion>,
}

impl Needs {
    /// The newest glibc asked for, if any.
    pub fn newest_glibc(&self) -> Option<GlibcVersion> {
        self.glibc.iter().next_back().copied()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF executable")]
    NotElf,
    #[error("a 32-bit or big-endian ELF file (a 64-bit little-endian one was expected)")]
    NotElf64,
    #[error("the ELF file is cut short or inconsistent: {0}")]
    Truncated(&'static str),
}

const SHT_DYNAMIC: u32 = 6;
const SHT_GNU_VERNEED: u32 = 0x6fff_fffe;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const EM_X86_64: u16 = 62;

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes(&self, at: u64, len: u64) -> Result<&[u8], ElfError> {
        let start = usize::try_from(at).map_err(|_| ElfError::Truncated("offset"))?;
        let len = usize::try_from(len).map_err(|_| ElfError::Truncated("length"))?;
        let end = start
            .checked_add(len)
            .ok_or(ElfError::Truncated("offset"))?;
        self.0
            .get(start..end)
            .ok_or(ElfError::Truncated("past the end"))
    }
    fn u16(&self, at: u64) -> Result<u16, ElfError> {
        Ok(u16::from_le_bytes(self.bytes(at, 2)?.try_into().unwrap()))
    }
    fn u32(&self, at: u64) -> Result<u32, ElfError> {
        Ok(u32::from_le_bytes(self.bytes(at, 4)?.try_into().unwrap()))
    }
    fn u64(&self, at: u64) -> Result<u64, ElfError> {
        Ok(u64::from_le_bytes(self.bytes(at, 8)?.try_into().unwrap()))
    }
    /// A NUL-terminated string at `at` within the string table `[table, table+size)`.
    fn string(&self, table: u64, size: u64, at: u64) -> Result<String, ElfError> {
        if at >= size {
            return Err(ElfError::Truncated("string offset"));
        }
        let text = self.bytes(table + at, size - at)?;
        let end = text
            .iter()
            .position(|b| *b == 0)
            .ok_or(ElfError::Truncated("unterminated string"))?;
        Ok(String::from_utf8_lossy(&text[..end]).into_owned())
    }
}

struct Section {
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
    entry_size: u64,
}

/// Reads what an executable needs.
pub fn needs(file: &[u8]) -> Result<Needs, ElfError> {
    if file.len() < 64 || &file[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    if file[4] != 2 || file[5] != 1 {
        return Err(ElfError::NotElf64);
    }
    let r = Reader(file);
    let machine = r.u16(18)?;
    let section_table = r.u64(0x28)?;
    let entry_size = u64::from(r.u16(0x3a)?);
    let count = u64::from(r.u16(0x3c)?);
    if entry_size < 64 {
        return Err(ElfError::Truncated("section header size"));
    }
    let sections: Vec<Section> = (0..count)
        .map(|i| {
            let at = section_table + i * entry_size;
            Ok(Section {
                kind: r.u32(at + 4)?,
                offset: r.u64(at + 0x18)?,
                size: r.u64(at + 0x20)?,
                link: r.u32(at + 0x28)?,
                entry_size: r.u64(at + 0x38)?,
            })
        })
        .collect::<Result<_, ElfError>>()?;
    let strings_of = |s: &Section| -> Result<(u64, u64), ElfError> {
        let table = sections
            .get(s.link as usize)
            .ok_or(ElfError::Truncated("string table link"))?;
        Ok((table.offset, table.size))
    };
    let mut libraries = BTreeSet::new();
    for dynamic in sections.iter().filter(|s| s.kind == SHT_DYNAMIC) {
        let (table, size) = strings_of(dynamic)?;
        let step = dynamic.entry_size.max(16);
        let mut at = dynamic.offset;
        while at + 16 <= dynamic.offset + dynamic.size {
            let tag = r.u64(at)?;
            if tag == DT_NULL {
                break;
            }
            if tag == DT_NEEDED {
                libraries.insert(r.string(table, size, r.u64(at + 8)?)?);
            }
            at += step;
        }
    }
    let mut glibc = BTreeSet::new();
    for verneed in sections.iter().filter(|s| s.kind == SHT_GNU_VERNEED) {
        let (table, size) = strings_of(verneed)?;
        let mut need = verneed.offset;
        // Each entry: vn_version u16, vn_cnt u16, vn_file u32, vn_aux u32, vn_next u32.
        for _ in 0..1024 {
            let aux_count = r.u16(need + 2)?;
            let mut aux = need + u64::from(r.u32(need + 8)?);
            // Each auxiliary: vna_hash u32, vna_flags u16, vna_other u16, vna_name u32, vna_next u32.
            for _ in 0..aux_count {
                let name = r.string(table, size, u64::from(r.u32(aux + 8)?))?;
                if let Some(version) = glibc_version(&name) {
                    glibc.insert(version);
                }
                let next = r.u32(aux + 12)?;
                if next == 0 {
                    break;
                }
                aux += u64::from(next);
            }
            let next = r.u32(need + 12)?;
            if next == 0 {
                break;
            }
            need += u64::from(next);
        }
    }
    Ok(Needs {
        x86_64: machine == EM_X86_64,
        libraries,
        glibc,
    })
}

/// `GLIBC_2.28` → `(2, 28)`; other version names (`GLIBC_PRIVATE`, `GCC_3.0`) → `None`.
pub fn glibc_version(name: &str) -> Option<GlibcVersion> {
    let version = name.strip_prefix("GLIBC_")?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glibc_version_names_are_read_and_others_left_out() {
        assert_eq!(glibc_version("GLIBC_2.28"), Some((2, 28)));
        assert_eq!(glibc_version("GLIBC_2.2.5"), Some((2, 2)));
        assert_eq!(glibc_version("GLIBC_PRIVATE"), None);
        assert_eq!(glibc_version("GCC_3.0"), None);
    }

    #[test]
    fn what_is_not_a_64_bit_elf_file_is_refused_without_panicking() {
        assert_eq!(needs(b"#!/bin/sh\necho hi\n"), Err(ElfError::NotElf));
        let mut elf32 = vec![0u8; 64];
        elf32[..4].copy_from_slice(b"\x7fELF");
        elf32[4] = 1;
        elf32[5] = 1;
        assert_eq!(needs(&elf32), Err(ElfError::NotElf64));
        // A header that points past the end of the file.
        let mut cut = vec![0u8; 64];
        cut[..4].copy_from_slice(b"\x7fELF");
        cut[4] = 2;
        cut[5] = 1;
        cut[0x28..0x30].copy_from_slice(&1000u64.to_le_bytes());
        cut[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        cut[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        assert!(matches!(needs(&cut), Err(ElfError::Truncated(_))));
    }

    /// This test's own executable, linked on this machine: it is x86-64 here, names libc, and
    /// asks for glibc versions (the newest at least 2.2.5, the x86-64 baseline).
    #[test]
    fn a_binary_linked_here_names_libc_and_its_glibc_versions() {
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needs = needs(&me).unwrap();
        assert_eq!(needs.x86_64, cfg!(target_arch = "x86_64"));
        assert!(needs.libraries.contains("libc.so.6"), "{needs:?}");
        assert!(needs.newest_glibc().unwrap() >= (2, 2), "{needs:?}");
    }
}
