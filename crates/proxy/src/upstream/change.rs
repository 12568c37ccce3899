//! Changes to a group's servers without a reload (NGINX Plus's API on a group in a `zone`):
//! each makes a new version of the group. Peers that stay keep their ID and the state every
//! worker shares (failures, active attempts, health), so a change never forgets what the
//! group knows of the others; a request under way finishes with the version it began with.

use super::compile::{peer_confs, Method};
use super::peers::{PeerConf, ServerParams};
use super::{Peer, Upstream};

/// What the API asks of a group.
#[derive(Debug, Clone)]
pub enum Change {
    /// A new server: one peer per address `server` resolves to.
    Add {
        server: String,
        params: ServerParams,
    },
    /// Server `id` with these settings, and at this address if one is given.
    Modify {
        id: u32,
        server: Option<String>,
        params: ServerParams,
    },
    Remove {
        id: u32,
    },
}

/// Why a change cannot be made, as NGINX Plus's API codes name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeError {
    /// No server has this ID (`UpstreamServerNotFound`).
    NotFound(u32),
    /// The address does not resolve, or is not an address (`UpstreamBadAddress`).
    BadAddress(String),
    /// A parameter the group's balancer does not take (`UpstreamConfFormatError`).
    Unsupported(&'static str),
    /// `backup` cannot change on a server (`UpstreamConfFormatError`).
    BackupImmutable,
    /// The weights make too large a consistent hash ring (`UpstreamBadWeight`).
    Weights(String),
    /// The group has no `zone` (`UpstreamStatic`).
    Static,
}

impl std::fmt::Display for ChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChangeError::NotFound(id) => write!(f, "server with ID \"{id}\" does not exist"),
            ChangeError::BadAddress(e) => f.write_str(e),
            ChangeError::Unsupported(p) => {
                write!(f, "balancing method does not support parameter \"{p}\"")
            }
            ChangeError::BackupImmutable => f.write_str("\"backup\" cannot be changed"),
            ChangeError::Weights(e) => f.write_str(e),
            ChangeError::Static => f.write_str("upstream is static"),
        }
    }
}

impl std::error::Error for ChangeError {}

impl Upstream {
    /// The group as `change` leaves it, and the IDs of the servers it added or changed. A
    /// group outside a `zone` is static.
    pub fn changed(&self, change: &Change) -> Result<(Upstream, Vec<u32>), ChangeError> {
        if self.zone.is_none() {
            return Err(ChangeError::Static);
        }
        let mut next_id = self.next_id;
        let (peers, ids) = match change {
            Change::Add { server, params } => {
                self.allowed(params)?;
                let mut peers: Vec<Peer> = self.peers.iter().map(Peer::kept).collect();
                let mut ids = Vec::new();
                for conf in confs(server, params)? {
                    ids.push(next_id);
                    peers.push(Peer::new(conf, next_id));
                    next_id = next_id.saturating_add(1);
                }
                (peers, ids)
            }
            Change::Modify { id, server, params } => {
                let old = self.by_id(*id)?;
                self.allowed(params)?;
                if params.backup != old.is_backup() {
                    return Err(ChangeError::BackupImmutable);
                }
                let moved = server
                    .as_deref()
                    .filter(|s| *s != old.server() && *s != &*old.name);
                let new = match moved {
                    Some(server) => {
                        let mut confs = confs(server, params)?;
                        if confs.len() != 1 {
                            return Err(ChangeError::BadAddress(format!(
                                "\"{server}\" resolves to more than one address"
                            )));
                        }
                        Peer::new(confs.remove(0), *id)
                    }
                    None => old.changed(params.clone()),
                };
                let peers = (self.peers.iter())
                    .map(|p| if p.id() == *id { new.kept() } else { p.kept() })
                    .collect();
                (peers, vec![*id])
            }
            Change::Remove { id } => {
                self.by_id(*id)?;
                let peers = (self.peers.iter())
                    .filter(|p| p.id() != *id)
                    .map(Peer::kept)
                    .collect();
                (peers, Vec::new())
            }
        };
        // In the order they were added, as a reload would read them from the state file.
        let mut peers = peers;
        peers.sort_by_key(Peer::id);
        let up = Upstream::assemble(
            self.name.clone(),
            self.group,
            self.method.clone(),
            peers,
            next_id,
            self.keepalive.clone(),
            self.epoch,
        )
        .map_err(ChangeError::Weights)?
        .in_zone(self.zone.clone());
        Ok((up, ids))
    }

    /// This version's balancer and keepalive with the servers of `kept`, an earlier version
    /// of the same group that the API changed: a reload keeps what the API did (the servers,
    /// their settings and IDs), and starts their state anew, as it does for the others. If
    /// this version's balancer cannot take their weights, this version as it is.
    pub fn with_servers_of(self, kept: &Upstream) -> Upstream {
        if kept.peers.iter().any(|p| self.allowed(p.params()).is_err()) {
            return self;
        }
        let peers = kept.peers.iter().map(Peer::renewed).collect();
        match Upstream::assemble(
            self.name.clone(),
            self.group,
            self.method.clone(),
            peers,
            kept.next_id,
            self.keepalive.clone(),
            self.epoch,
        ) {
            Ok(up) => up.in_zone(self.zone),
            Err(_) => self,
        }
    }

    /// The server with ID `id`.
    pub fn by_id(&self, id: u32) -> Result<&Peer, ChangeError> {
        (self.peers.iter())
            .find(|p| p.id() == id)
            .ok_or(ChangeError::NotFound(id))
    }

    /// The group's peers as `server` lines would say them, in the order of their IDs: what
    /// a `state` file keeps.
    pub fn server_lines(&self) -> String {
        let mut peers: Vec<&Peer> = self.peers.iter().collect();
        peers.sort_by_key(|p| p.id());
        let defaults = ServerParams::default();
        let mut out = String::new();
        for p in peers {
            let q = p.params();
            out.push_str("server ");
            out.push_str(&p.name);
            if q.weight != defaults.weight {
                out.push_str(&format!(" weight={}", q.weight));
            }
            if q.max_conns != defaults.max_conns {
                out.push_str(&format!(" max_conns={}", q.max_conns));
            }
            if q.max_fails != defaults.max_fails {
                out.push_str(&format!(" max_fails={}", q.max_fails));
            }
            if q.fail_timeout != defaults.fail_timeout {
                out.push_str(&format!(" fail_timeout={}s", q.fail_timeout.as_secs()));
            }
            if !q.slow_start.is_zero() {
                out.push_str(&format!(" slow_start={}s", q.slow_start.as_secs()));
            }
            for (on, word) in [(q.backup, "backup"), (q.down, "down"), (q.drain, "drain")] {
                if on {
                    out.push(' ');
                    out.push_str(word);
                }
            }
            out.push_str(";\n");
        }
        out
    }

    /// Whether the group's balancer takes these settings, as the configuration checks them.
    fn allowed(&self, params: &ServerParams) -> Result<(), ChangeError> {
        if params.weight == 0 {
            return Err(ChangeError::Weights("invalid \"weight\"".into()));
        }
        let steered = matches!(self.method, Method::RoundRobin | Method::LeastConn);
        if params.backup && !steered {
            return Err(ChangeError::Unsupported("backup"));
        }
        if !params.slow_start.is_zero() && !steered {
            return Err(ChangeError::Unsupported("slow_start"));
        }
        Ok(())
    }
}

/// The peers of a new server: one per address of `server`.
fn confs(server: &str, params: &ServerParams) -> Result<Vec<PeerConf>, ChangeError> {
    // A state file keeps it as one word of a `server` line.
    let word =
        |c: char| !c.is_whitespace() && !matches!(c, ';' | '{' | '}' | '"' | '\'' | '#' | '\\');
    if server.is_empty() || !server.chars().all(word) {
        return Err(ChangeError::BadAddress(format!(
            "invalid \"server\" argument \"{server}\""
        )));
    }
    peer_confs(server, params)
        .map_err(|e| ChangeError::BadAddress(format!("{e} in upstream \"{server}\"")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{Key, Outcome};
    use portcullis_config::load_str;
    use std::time::Instant;

    fn group(body: &str) -> Upstream {
        let text = format!("events {{}}\nhttp {{\nupstream u {{\n{body}\n}}\n}}\n");
        let loaded = load_str(&text, std::path::Path::new("/t.conf"), &Default::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let http = loaded.directives.iter().find(|d| d.name == "http");
        let block = http.and_then(|h| h.children().iter().find(|d| d.name == "upstream"));
        Upstream::compile(block.expect("an upstream block")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn add(up: &Upstream, server: &str, params: ServerParams) -> (Upstream, Vec<u32>) {
        let change = Change::Add {
            server: server.into(),
            params,
        };
        up.changed(&change).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn changes_keep_ids_and_shared_state() {
        let up = group("zone z 64k; server 127.0.0.1:1; server 127.0.0.1:2;");
        // Peer 0 fails once: the new versions must still know it.
        let now = Instant::now();
        let mut tried = up.tried();
        let id = up
            .select(&mut up.local_state(), Key::None, &mut tried, now)
            .expect("a peer");
        up.release(id, Outcome::Failed, now);
        let (two, ids) = add(&up, "127.0.0.1:3", ServerParams::default());
        assert_eq!(ids, vec![2]);
        assert_eq!(two.group(), up.group());
        assert_eq!(two.peers().len(), 3);
        assert_eq!(two.by_id(id.0 as u32).map(Peer::fails), Ok(1));
        let weight = ServerParams {
            weight: 4,
            ..ServerParams::default()
        };
        let modify = Change::Modify {
            id: 1,
            server: None,
            params: weight,
        };
        let (three, _) = two.changed(&modify).expect("modified");
        assert_eq!(three.by_id(1).map(Peer::weight), Ok(4));
        let (four, ids) = three.changed(&Change::Remove { id: 0 }).expect("removed");
        assert!(ids.is_empty());
        assert_eq!(
            four.peers().iter().map(Peer::id).collect::<Vec<_>>(),
            vec![1, 2]
        );
        // IDs are never given again.
        let (five, ids) = add(&four, "127.0.0.1:1", ServerParams::default());
        assert_eq!(ids, vec![3]);
        assert_eq!(
            five.by_id(3).map(Peer::fails),
            Ok(0),
            "a new peer, new state"
        );
        assert_eq!(
            five.server_lines(),
            "server 127.0.0.1:2 weight=4;\nserver 127.0.0.1:3;\nserver 127.0.0.1:1;\n"
        );
    }

    #[test]
    fn traffic_follows_the_change() {
        let up = group("zone z; server 127.0.0.1:1;");
        let (up, _) = add(&up, "127.0.0.1:2", ServerParams::default());
        let drain = ServerParams {
            drain: true,
            ..ServerParams::default()
        };
        let modify = Change::Modify {
            id: 0,
            server: None,
            params: drain,
        };
        let (up, _) = up.changed(&modify).expect("drained");
        let mut local = up.local_state();
        let now = Instant::now();
        for _ in 0..4 {
            let mut tried = up.tried();
            let id = up.select(&mut local, Key::None, &mut tried, now);
            assert_eq!(id.map(|i| up.peer(i).id()), Ok(1), "draining takes none");
            up.release(id.expect("a peer"), Outcome::Ok, now);
        }
        let (up, _) = up.changed(&Change::Remove { id: 1 }).expect("removed");
        let (up, _) = up.changed(&Change::Remove { id: 0 }).expect("removed");
        let mut tried = up.tried();
        assert!(up.select(&mut local, Key::None, &mut tried, now).is_err());
        assert!(up.peers().is_empty());
    }

    #[test]
    fn a_drained_single_server_takes_nothing() {
        let up = group("zone z; server 127.0.0.1:1;");
        let drain = Change::Modify {
            id: 0,
            server: None,
            params: ServerParams {
                drain: true,
                ..ServerParams::default()
            },
        };
        let (up, _) = up.changed(&drain).expect("drained");
        let mut tried = up.tried();
        let now = Instant::now();
        assert!(up
            .select(&mut up.local_state(), Key::None, &mut tried, now)
            .is_err());
    }

    #[test]
    fn refusals_are_plus_s() {
        let fixed = group("server 127.0.0.1:1;");
        let e = fixed.changed(&Change::Remove { id: 0 }).err();
        assert_eq!(e, Some(ChangeError::Static));
        let up = group("zone z; hash $uri; server 127.0.0.1:1;");
        let backup = ServerParams {
            backup: true,
            ..ServerParams::default()
        };
        let add = Change::Add {
            server: "127.0.0.1:2".into(),
            params: backup,
        };
        assert_eq!(
            up.changed(&add).err(),
            Some(ChangeError::Unsupported("backup"))
        );
        assert_eq!(
            up.changed(&Change::Remove { id: 7 }).err(),
            Some(ChangeError::NotFound(7))
        );
        let bad = Change::Add {
            server: "127.0.0.1:0".into(),
            params: ServerParams::default(),
        };
        assert!(matches!(up.changed(&bad), Err(ChangeError::BadAddress(_))));
        let up = group("zone z; server 127.0.0.1:1;");
        let modify = Change::Modify {
            id: 0,
            server: None,
            params: ServerParams {
                backup: true,
                ..ServerParams::default()
            },
        };
        assert_eq!(
            up.changed(&modify).err(),
            Some(ChangeError::BackupImmutable)
        );
    }
}
