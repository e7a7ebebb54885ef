//! Files inside the cluster's directory, read and written with the server
//! user's rights. That user owns the directory and can plant a link in it;
//! followed by root, a link would let it read or overwrite any file on the
//! machine. Run as that user, a link leads only where it could go anyway, and
//! a file is replaced whole (a temporary, then a rename that replaces a link
//! rather than following it).
//!
//! Without a server user (not root) the files are ours and plain calls do.

use std::ffi::OsStr;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use super::User;

/// Exit status of the read script when the file does not exist.
const ABSENT: i32 = 3;

/// The file's text, or `None` when there is no such file.
pub(super) fn read(run_as: Option<&User>, path: &Path) -> io::Result<Option<String>> {
    let Some(user) = run_as else {
        return match fs::read_to_string(path) {
            Ok(s) => Ok(Some(s)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        };
    };
    let out = as_user(
        user,
        &format!("[ -e \"$1\" ] || exit {ABSENT}; exec cat -- \"$1\""),
        path.as_os_str(),
        None,
    )?;
    match out.status.code() {
        Some(0) => Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned())),
        Some(ABSENT) => Ok(None),
        _ => Err(failed("reading", &out.stderr)),
    }
}

/// Replaces the file with `contents`, mode 0600, owned by the server user.
pub(super) fn write(run_as: Option<&User>, path: &Path, contents: &[u8]) -> io::Result<()> {
    let Some(user) = run_as else {
        let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
        let _ = fs::remove_file(&tmp);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(contents)?;
        drop(f);
        return fs::rename(&tmp, path);
    };
    // `mv -T`: a link (or a directory) planted at the name is replaced or
    // refused, never written through.
    let out = as_user(
        user,
        "umask 077; t=\"$1.$$.tmp\"; cat > \"$t\" && mv -fT -- \"$t\" \"$1\" \
         || { rm -f -- \"$t\"; exit 1; }",
        path.as_os_str(),
        Some(contents),
    )?;
    match out.status.success() {
        true => Ok(()),
        false => Err(failed("writing", &out.stderr)),
    }
}

fn as_user(
    user: &User,
    script: &str,
    path: &OsStr,
    input: Option<&[u8]>,
) -> io::Result<std::process::Output> {
    let mut child = Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(path)
        .uid(user.uid)
        .gid(user.gid)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("LC_ALL", "C")
        .current_dir("/")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    if let Some(bytes) = input {
        stdin.write_all(bytes)?;
    }
    drop(stdin);
    child.wait_with_output()
}

fn failed(what: &str, stderr: &[u8]) -> io::Error {
    io::Error::other(format!(
        "{what} as the server's user: {}",
        String::from_utf8_lossy(stderr).trim()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_an_absent_one_reads_none() {
        let dir = std::env::temp_dir().join(format!("tidemark-files-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.conf");
        assert_eq!(read(None, &path).unwrap(), None);
        write(None, &path, b"one\n").unwrap();
        write(None, &path, b"two\n").unwrap();
        assert_eq!(read(None, &path).unwrap().as_deref(), Some("two\n"));
        let names: Vec<_> = fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temporary left: {names:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
