//! Data roots: the only directories (and object-store prefixes) readerd reads from. A
//! spec names files relative to a root (glob patterns allowed); anything that would leave
//! the roots — an absolute path, `..`, a URL, a symlink pointing out — is refused. Errors name the pattern as the spec wrote
//! it, never a file found through a symlink that leads out: what lies outside the roots
//! is not revealed, not even whether it exists.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::object::{ObjectRoot, ObjectSettings};
use super::{DataFile, FileLocation, SourceError};

/// A data root as configured: a local folder or an object-store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootLocation {
    Local(PathBuf),
    /// `s3://bucket/prefix`, `gs://...`, `az://...`, `http(s)://...`.
    Url(String),
}

impl std::str::FromStr for RootLocation {
    type Err = std::convert::Infallible;

    fn from_str(root: &str) -> Result<Self, Self::Err> {
        Ok(if root.contains("://") { RootLocation::Url(root.to_owned()) } else { RootLocation::Local(root.into()) })
    }
}

impl std::fmt::Display for RootLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RootLocation::Local(path) => write!(f, "{}", path.display()),
            RootLocation::Url(url) => f.write_str(&readerd_common::object::redact_url(url)),
        }
    }
}

#[derive(Clone, Debug)]
enum Root {
    /// A canonical path.
    Local(PathBuf),
    Object(Arc<ObjectRoot>),
}

#[derive(Clone, Debug)]
pub struct DataRoots {
    /// In the order given.
    roots: Arc<[Root]>,
}

impl DataRoots {
    /// Local folders only.
    pub fn new(dirs: &[PathBuf]) -> std::io::Result<Self> {
        let roots =
            dirs.iter().map(|dir| Ok(Root::Local(std::fs::canonicalize(dir)?))).collect::<std::io::Result<Vec<_>>>()?;
        Ok(Self { roots: roots.into() })
    }

    /// Folders and object-store prefixes, the stores built from `settings`.
    pub fn open(locations: &[RootLocation], settings: &ObjectSettings) -> Result<Self, SourceError> {
        let mut roots = Vec::with_capacity(locations.len());
        for location in locations {
            roots.push(match location {
                RootLocation::Local(dir) => Root::Local(std::fs::canonicalize(dir).map_err(|err| {
                    SourceError::BadRoot { root: dir.display().to_string(), reason: err.to_string() }
                })?),
                RootLocation::Url(url) => Root::Object(Arc::new(ObjectRoot::open(url, settings)?)),
            });
        }
        Ok(Self { roots: roots.into() })
    }

    /// The files `pattern` names, from the first root where it matches anything; glob
    /// matches sorted by name.
    pub fn resolve(&self, pattern: &str) -> Result<Vec<DataFile>, SourceError> {
        let outside = || SourceError::OutsideDataRoots { path: pattern.to_owned() };
        let relative = Path::new(pattern);
        let escapes = pattern.is_empty()
            || pattern.contains("://")
            || relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
        if escapes {
            return Err(outside());
        }
        for root in self.roots.iter() {
            let found = match root {
                Root::Local(root) => resolve_local(root, pattern)?,
                Root::Object(root) => {
                    // Object names have no `.` components: `a/./b` is `a/b`.
                    let normal: Vec<&str> =
                        pattern.split('/').filter(|part| !part.is_empty() && *part != ".").collect();
                    let files = root.resolve(&normal.join("/"))?;
                    files
                        .into_iter()
                        .map(|(name, object)| DataFile {
                            name: name.into(),
                            location: FileLocation::Object(object),
                            part: None,
                        })
                        .collect()
                }
            };
            if !found.is_empty() {
                return Ok(found);
            }
        }
        Err(SourceError::NoMatch { pattern: pattern.to_owned() })
    }
}

/// The files `pattern` (checked not to leave the root lexically) names under `root`.
fn resolve_local(root: &Path, pattern: &str) -> Result<Vec<DataFile>, SourceError> {
    let relative = Path::new(pattern);
    if leads_out(root, relative) {
        return Err(SourceError::OutsideDataRoots { path: pattern.to_owned() });
    }
    let candidates = if pattern.contains(GLOB_CHARS) {
        let full = root.join(pattern);
        let full = full.to_str().ok_or_else(|| SourceError::BadPattern {
            pattern: pattern.to_owned(),
            reason: "not valid UTF-8".to_owned(),
        })?;
        let paths = glob::glob(full)
            .map_err(|err| SourceError::BadPattern { pattern: pattern.to_owned(), reason: err.msg.to_owned() })?;
        let mut paths: Vec<PathBuf> = paths.filter_map(Result::ok).filter(|p| p.is_file()).collect();
        paths.sort();
        paths
    } else {
        let path = root.join(relative);
        if path.is_dir() {
            return Err(SourceError::BadPattern { pattern: pattern.to_owned(), reason: "is a directory".to_owned() });
        }
        if path.exists() { vec![path] } else { Vec::new() }
    };
    candidates.into_iter().map(|path| confine(root, path, pattern)).collect()
}

/// The characters that make a file name a glob pattern.
const GLOB_CHARS: [char; 3] = ['*', '?', '['];

/// Whether the folder that `pattern`'s leading literal components name under `root` (the
/// components before the first wildcard; a plain path's parent folder) resolves outside
/// the root: a symlink out, or a folder under one. Checked before matching, so that
/// nothing outside is listed and a missing file there is refused like an existing one.
fn leads_out(root: &Path, pattern: &Path) -> bool {
    let components: Vec<Component> = pattern.components().collect();
    let literal: PathBuf = components
        .iter()
        .take(components.len().saturating_sub(1))
        .take_while(|c| !c.as_os_str().to_string_lossy().contains(GLOB_CHARS))
        .collect();
    std::fs::canonicalize(root.join(literal)).is_ok_and(|real| !real.starts_with(root))
}

/// Checks that `path`, a match of `pattern` lexically under `root`, really lies under it
/// once symlinks are resolved, and names it as written relative to the root. Errors name
/// the pattern, not the match: a match through a symlink may lie outside the roots.
fn confine(root: &Path, path: PathBuf, pattern: &str) -> Result<DataFile, SourceError> {
    let real = std::fs::canonicalize(&path).map_err(|source| SourceError::Open { file: pattern.to_owned(), source })?;
    if !real.starts_with(root) {
        return Err(SourceError::OutsideDataRoots { path: pattern.to_owned() });
    }
    let name = path.strip_prefix(root).expect("joined to root").to_string_lossy().into_owned();
    Ok(DataFile::local(name, real))
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

    #[test]
    fn symlinked_folders_out_of_the_root_are_refused_naming_only_the_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("inside")).unwrap();
        std::fs::write(root.join("inside/a.rec"), b"x").unwrap();
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("private-name.rec"), b"s").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("linkdir")).unwrap();
        std::os::unix::fs::symlink(root.join("inside"), root.join("samedir")).unwrap();
        let roots = DataRoots::new(&[root]).unwrap();

        for pattern in ["linkdir/*", "linkdir/*.rec", "linkdir/private-name.rec", "linkdir/absent.rec", "*/*.rec"] {
            let err = roots.resolve(pattern).unwrap_err();
            assert!(matches!(err, SourceError::OutsideDataRoots { .. }), "{pattern}: {err}");
            let message = err.to_string();
            assert_eq!(message, format!("{pattern} is outside the data roots"));
            assert!(!message.contains("private-name") || pattern.contains("private-name"), "{message}");
            assert!(!message.contains(outside.to_str().unwrap()), "{message}");
        }
        // A symlink to a folder inside the root is followed, under its own name.
        let names: Vec<_> = roots.resolve("samedir/*").unwrap().iter().map(|f| f.name.to_string()).collect();
        assert_eq!(names, ["samedir/a.rec"]);
    }
}
