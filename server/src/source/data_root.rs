//! Data roots: the only directories readerd reads from. A spec names files relative to a
//! root (glob patterns allowed); anything that would leave the roots — an absolute path,
//! `..`, a symlink pointing out — is refused.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::{DataFile, SourceError};

#[derive(Clone, Debug)]
pub struct DataRoots {
    /// Canonical paths, in the order given.
    roots: Arc<[PathBuf]>,
}

impl DataRoots {
    pub fn new(dirs: &[PathBuf]) -> std::io::Result<Self> {
        let roots = dirs.iter().map(std::fs::canonicalize).collect::<Result<Vec<_>, _>>()?;
        Ok(Self { roots: roots.into() })
    }

    /// The files `pattern` names, from the first root where it matches anything; glob
    /// matches sorted by name.
    pub fn resolve(&self, pattern: &str) -> Result<Vec<DataFile>, SourceError> {
        let relative = Path::new(pattern);
        let escapes =
            pattern.is_empty() || relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
        if escapes {
            return Err(SourceError::OutsideDataRoots { path: pattern.to_owned() });
        }
        let is_glob = pattern.contains(['*', '?', '[']);
        for root in self.roots.iter() {
            let candidates = if is_glob {
                let full = root.join(pattern);
                let full = full.to_str().ok_or_else(|| SourceError::BadPattern {
                    pattern: pattern.to_owned(),
                    reason: "not valid UTF-8".to_owned(),
                })?;
                let paths = glob::glob(full).map_err(|err| SourceError::BadPattern {
                    pattern: pattern.to_owned(),
                    reason: err.msg.to_owned(),
                })?;
                let mut paths: Vec<PathBuf> = paths.filter_map(Result::ok).filter(|p| p.is_file()).collect();
                paths.sort();
                paths
            } else {
                let path = root.join(relative);
                if path.is_dir() {
                    return Err(SourceError::BadPattern {
                        pattern: pattern.to_owned(),
                        reason: "is a directory".to_owned(),
                    });
                }
                if path.exists() { vec![path] } else { Vec::new() }
            };
            if candidates.is_empty() {
                continue;
            }
            return candidates.into_iter().map(|path| confine(root, path)).collect();
        }
        Err(SourceError::NoMatch { pattern: pattern.to_owned() })
    }
}

/// Checks that `path` (lexically under `root`) really lies under it once symlinks are
/// resolved, and names it as written relative to the root.
fn confine(root: &Path, path: PathBuf) -> Result<DataFile, SourceError> {
    let name = path.strip_prefix(root).expect("joined to root").to_string_lossy().into_owned();
    let real = std::fs::canonicalize(&path).map_err(|source| SourceError::Open { file: name.clone(), source })?;
    if !real.starts_with(root) {
        return Err(SourceError::OutsideDataRoots { path: name });
    }
    Ok(DataFile { name: name.into(), path: real })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_globs_sorted_and_refuses_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        for name in ["sub/b.rec", "sub/a.rec", "sub/c.txt"] {
            std::fs::write(root.join(name), b"x").unwrap();
        }
        std::fs::write(dir.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), root.join("link")).unwrap();
        let roots = DataRoots::new(&[root]).unwrap();

        let names: Vec<_> = roots.resolve("sub/*.rec").unwrap().iter().map(|f| f.name.to_string()).collect();
        assert_eq!(names, ["sub/a.rec", "sub/b.rec"]);
        assert!(matches!(roots.resolve("sub/none*"), Err(SourceError::NoMatch { .. })));
        assert!(matches!(roots.resolve("missing"), Err(SourceError::NoMatch { .. })));
        for escape in ["../secret", "/etc/passwd", "sub/../../secret", "link", ""] {
            assert!(
                matches!(roots.resolve(escape), Err(SourceError::OutsideDataRoots { .. })),
                "{escape} must be refused"
            );
        }
    }
}
