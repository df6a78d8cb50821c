//! Output files written in place of whatever a path names: refused unless it is absent or,
//! with `--force`, a regular file; written beside it under a temporary name and renamed
//! over it only once there is something to keep, so a failed run never destroys it.
use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// What the output path names now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Absent,
    /// A regular file (an earlier recording or report is one): replaced only with `--force`.
    Regular,
}

/// Decides whether `path` may be written, without following a symlink in its last
/// component: a device node, FIFO, socket or symlink is never replaced, since renaming
/// over it would delete the node (or the link) and leave a regular file in its place.
pub fn check(path: &Path, force: bool) -> Result<Target> {
    let p = path.display();
    if is_stdout(path) {
        // Only whole-text outputs (`report --html -`) stream; their callers ask first.
        bail!("-: this output is a database file written in place, not a stream; give a file name");
    }
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            let dir = parent_dir(path);
            if !dir.is_dir() {
                bail!(
                    "cannot create {p}: directory {} does not exist",
                    dir.display()
                );
            }
            return Ok(Target::Absent);
        }
        Err(e) => bail!("cannot write {p}: {}", e.kind()),
    };
    let t = meta.file_type();
    if t.is_file() {
        if !force {
            bail!("{p} already exists; pass --force to overwrite it");
        }
        return Ok(Target::Regular);
    }
    if t.is_dir() {
        bail!("{p} is a directory");
    }
    let what = if t.is_symlink() {
        "a symbolic link"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    };
    bail!(
        "{p} is {what}; ddioscope writes only to regular files, and never replaces anything else"
    );
}

/// The directory an output lands in ("." for a bare file name).
/// `-`, which names stdout for the outputs that can stream (`report --html -`), as for most
/// Unix tools.
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

pub fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

const TMP_SUFFIX: &str = ".ddioscope-tmp";

/// `DIR/.NAME.PID.ddioscope-tmp`: hidden, in the same directory (so the final rename is
/// atomic and never crosses a file system), and unique to its writer.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or_default());
    name.push(format!(".{}{TMP_SUFFIX}", std::process::id()));
    parent_dir(path).join(name)
}

/// Creates the temporary file for `path`, with an exclusive flock held as long as the
/// returned File is open: a later run that finds the file can tell a writer that still
/// runs (in any pid namespace) from one that died, since the lock dies with it.
pub fn create_temp(path: &Path) -> Result<(PathBuf, File)> {
    sweep_stale(path);
    let tmp = temp_path(path);
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot create {}: {}",
                path.display(),
                io_words(&e, parent_dir(path))
            )
        })?;
    // A file just created is known to no one else: the lock cannot be contended.
    // SAFETY: flock on a descriptor this File owns.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    Ok((tmp, f))
}

/// An I/O error in words, naming the directory where that is the cause.
pub fn io_words(e: &std::io::Error, dir: &Path) -> String {
    match e.kind() {
        ErrorKind::PermissionDenied => format!(
            "permission denied in {} (choose another path)",
            dir.display()
        ),
        ErrorKind::ReadOnlyFilesystem => format!("{} is on a read-only file system", dir.display()),
        ErrorKind::StorageFull => "the disk is full".to_string(),
        ErrorKind::NotFound => format!("directory {} does not exist", dir.display()),
        k => k.to_string(),
    }
}

/// Removes temporary files left beside `path` by writers that died before their first
/// rename (a SIGKILL), with their SQLite journals: only names of our own pattern, and only
/// when no live writer holds the file's lock.
fn sweep_stale(path: &Path) {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return;
    };
    let prefix = format!(".{name}.");
    let dir = parent_dir(path);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(f) = file_name.to_str() else {
            continue;
        };
        let Some(rest) = f.strip_prefix(&prefix) else {
            continue;
        };
        let db = rest.strip_suffix("-journal").unwrap_or(rest);
        let ours = db
            .strip_suffix(TMP_SUFFIX)
            .is_some_and(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()));
        if !ours || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        // A journal goes with its database file: it is stale when that one is.
        let db_path = dir.join(format!("{prefix}{db}"));
        let lock = match File::open(&db_path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            Err(_) => continue,
        };
        // SAFETY: flock on a descriptor `lock` owns; released when it is dropped.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Moves the finished temporary file onto `path`, checking the target again first (it
/// may have changed since the run started). Without `force` an existing file is never
/// replaced, even one that appeared meanwhile: the hard link fails instead.
pub fn publish(tmp: &Path, path: &Path, force: bool) -> Result<()> {
    check(path, force)?;
    let dir = parent_dir(path);
    let linked = if force {
        std::fs::rename(tmp, path)
    } else {
        std::fs::hard_link(tmp, path).and_then(|()| std::fs::remove_file(tmp))
    };
    match linked {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            bail!(
                "{} already exists; pass --force to overwrite it",
                path.display()
            )
        }
        // File systems without hard links: check again, then rename.
        Err(_) if !force && check(path, false).is_ok() => {
            std::fs::rename(tmp, path).map_err(|e| {
                anyhow::anyhow!("cannot write {}: {}", path.display(), io_words(&e, dir))
            })?
        }
        Err(e) => bail!("cannot write {}: {}", path.display(), io_words(&e, dir)),
    }
    // The rename itself survives a crash only once the directory is on disk.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Writes `bytes` to `path` as a whole: refused as `check` decides, written under a
/// temporary name, then renamed into place; on any error the temporary file is removed
/// and `path` is left as it was.
pub fn write_whole(path: &Path, force: bool, bytes: &[u8]) -> Result<()> {
    check(path, force)?;
    let (tmp, mut f) = create_temp(path)?;
    let written = f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| {
        anyhow::anyhow!(
            "cannot write {}: {}",
            path.display(),
            io_words(&e, parent_dir(path))
        )
    });
    let result = written.and_then(|()| publish(&tmp, path, force));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    // Unlocked only now: until renamed, the file is a live writer's.
    drop(f);
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn err(path: &Path, force: bool) -> String {
        let e = check(path, force).unwrap_err().to_string();
        assert_eq!(e.lines().count(), 1, "{e}");
        e
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn absent_is_created_and_a_regular_file_needs_force() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        assert_eq!(check(&p, false).unwrap(), Target::Absent);
        std::fs::write(&p, "keep").unwrap();
        assert!(err(&p, false).contains("--force"));
        assert_eq!(check(&p, true).unwrap(), Target::Regular);
        let missing = d.path().join("no-dir").join("r.ddio");
        assert!(err(&missing, true).contains("does not exist"));
    }

    #[test]
    fn a_directory_is_said_plainly_without_suggesting_force() {
        let d = tempfile::tempdir().unwrap();
        for force in [false, true] {
            let e = err(d.path(), force);
            assert!(
                e.ends_with("is a directory") && !e.contains("--force"),
                "{e}"
            );
        }
    }

    #[test]
    fn nodes_and_links_are_refused_even_with_force() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        let target = d.path().join("target");
        std::fs::write(&target, "the link's target").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let dangling = d.path().join("dangling");
        std::os::unix::fs::symlink(d.path().join("nowhere"), &dangling).unwrap();
        let sock = d.path().join("sock");
        let _l = UnixListener::bind(&sock).unwrap();
        for (p, what) in [
            (&fifo, "a FIFO"),
            (&link, "a symbolic link"),
            (&dangling, "a symbolic link"),
            (&sock, "a socket"),
        ] {
            for force in [false, true] {
                let e = err(p, force);
                assert!(e.contains(what) && !e.contains("--force"), "{e}");
            }
        }
        // A character device, where the test can see one (/dev/null always exists).
        assert!(err(Path::new("/dev/null"), true).contains("a character device"));
        // Refusals touch nothing.
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "the link's target"
        );
    }

    #[test]
    fn write_whole_replaces_only_what_check_allows_and_leaves_no_temp() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("out.html");
        write_whole(&p, false, b"one").unwrap();
        assert!(write_whole(&p, false, b"two").is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"one");
        write_whole(&p, true, b"three").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"three");
        let fifo = d.path().join("fifo");
        mkfifo(&fifo);
        assert!(write_whole(&fifo, true, b"x").is_err());
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn publish_without_force_never_replaces_a_file_that_appeared_meanwhile() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        let (tmp, _f) = create_temp(&p).unwrap();
        std::fs::write(&p, "someone else's").unwrap();
        assert!(publish(&tmp, &p, false).is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "someone else's");
        assert!(tmp.exists());
    }

    #[test]
    fn stale_temps_of_dead_writers_are_swept_and_live_ones_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.ddio");
        let name =
            |id: &str, suffix: &str| d.path().join(format!(".r.ddio.{id}{TMP_SUFFIX}{suffix}"));
        // A dead writer's file and journal: no lock held.
        let (dead, dead_journal) = (name("111", ""), name("111", "-journal"));
        let orphan_journal = name("222", "-journal");
        // A live writer's: locked, as create_temp leaves it.
        let live = name("333", "");
        let live_journal = name("333", "-journal");
        let other = d.path().join(format!(".other.444{TMP_SUFFIX}"));
        let not_ours = d.path().join(".r.ddio.backup");
        for f in [
            &dead,
            &dead_journal,
            &orphan_journal,
            &live,
            &live_journal,
            &other,
            &not_ours,
        ] {
            std::fs::write(f, "").unwrap();
        }
        let held = File::open(&live).unwrap();
        // SAFETY: flock on a descriptor `held` owns.
        assert_eq!(
            unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) },
            0
        );
        let (tmp, _f) = create_temp(&p).unwrap();
        assert!(!dead.exists() && !dead_journal.exists() && !orphan_journal.exists());
        assert!(
            live.exists()
                && live_journal.exists()
                && other.exists()
                && not_ours.exists()
                && tmp.exists()
        );
        // The one just made is locked as well: another writer's sweep keeps it.
        sweep_stale(&p);
        assert!(tmp.exists());
    }
}
