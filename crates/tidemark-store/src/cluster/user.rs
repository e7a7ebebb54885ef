//! The account the server runs as when Tidemark runs as root (PostgreSQL
//! refuses to run as root): `$TIDEMARK_PG_USER`, else `postgres`, never
//! root or `nobody`.

use super::ClusterError;

/// An unprivileged account to run the server as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The account's name.
    pub name: String,
    /// Its user id.
    pub uid: u32,
    /// Its group id.
    pub gid: u32,
}

/// `$TIDEMARK_PG_USER`, else `postgres`, as the system's user database
/// knows it (`getpwnam`: /etc/passwd, or LDAP and the like through NSS).
pub(super) fn unprivileged_user() -> Result<User, ClusterError> {
    let wanted = std::env::var("TIDEMARK_PG_USER").unwrap_or_else(|_| "postgres".into());
    let found = nix::unistd::User::from_name(&wanted)
        .ok()
        .flatten()
        .map(|u| (u.uid.as_raw(), u.gid.as_raw()));
    account(&wanted, found)
}

/// The account `wanted`, found with its uid and gid (or not). Neither root
/// nor `nobody` (uid 65534), which many daemons share: any of them could
/// then reach the cluster's files.
fn account(wanted: &str, found: Option<(u32, u32)>) -> Result<User, ClusterError> {
    let refused = |why: &str| ClusterError::NoUser(format!("{wanted}: {why}"));
    let (uid, gid) = found.ok_or_else(|| refused("no such user"))?;
    if uid == 0 {
        return Err(refused("it is root"));
    }
    if wanted == "nobody" || uid == NOBODY {
        return Err(refused("`nobody` is shared by other daemons"));
    }
    Ok(User {
        name: wanted.to_owned(),
        uid,
        gid,
    })
}

/// The overflow uid, `nobody`'s.
const NOBODY: u32 = 65534;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_runs_as_an_account_of_its_own_never_root_or_nobody() {
        assert_eq!(
            account("postgres", Some((101, 104))).unwrap(),
            User {
                name: "postgres".into(),
                uid: 101,
                gid: 104
            }
        );
        let refused = [
            ("root", Some((0, 0))),
            ("nobody", Some((65534, 65534))),
            ("other", Some((65534, 100))),
            ("absent", None),
        ];
        for (name, found) in refused {
            let e = account(name, found).unwrap_err().to_string();
            assert!(e.contains(name) && e.contains("TIDEMARK_PG_USER"), "{e}");
        }
    }
}
