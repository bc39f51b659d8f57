//! Who is connected: the redlatch clients in `CLIENT LIST`, by the names their connections
//! carry, to name a report's holders and waiters and for [`Client::connected_clients`].

use redis::{ConnectionLike, RedisResult};

use super::ConnectedClient;
use crate::client::Client;
use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::LockKeys;

impl Client {
    /// The redlatch clients with a connection open to Redis (on a Cluster, to any master),
    /// by the names their connections carry (see [`ClientBuilder::name`]), one entry per
    /// client. Empty where the ACL does not allow `CLIENT LIST` (it is `@admin
    /// @dangerous`): knowing who is connected is a courtesy to the operator, not a need.
    ///
    /// [`ClientBuilder::name`]: crate::ClientBuilder::name
    pub fn connected_clients(&self) -> Result<Vec<ConnectedClient>> {
        let core = self.core();
        let list = |con: &mut dyn ConnectionLike| -> RedisResult<String> {
            redis::cmd("CLIENT").arg("LIST").query(con)
        };
        let lists = match core.backend.on_every_master(list) {
            Ok(lists) => lists,
            Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
                log::debug!("CLIENT LIST refused ({e}): owners are shown without names");
                return Ok(Vec::new());
            }
            Err(e) => return Err(Error::Redis(e)),
        };
        Ok(one_per_client(
            lists
                .iter()
                .flat_map(|list| parse_client_list(list))
                .collect(),
        ))
    }
}

/// The clients connected to the server that keeps object `keys` (on a Cluster the master of
/// its slot, where its holders and waiters have their connections), to name the owners in a
/// report. None when they cannot be asked (an ACL without CLIENT LIST, a server away): the
/// report stands without names.
pub(super) fn clients_by(core: &Core, keys: &LockKeys) -> Vec<ConnectedClient> {
    let list = |con: &mut dyn ConnectionLike| redis::cmd("CLIENT").arg("LIST").query(con);
    let listed: RedisResult<String> = if core.backend.is_cluster() {
        core.backend
            .link_for_slot(keys.slot())
            .and_then(|mut link| list(&mut link))
    } else {
        core.backend.run(list)
    };
    match listed {
        Ok(list) => one_per_client(parse_client_list(&list)),
        Err(e) => {
            log::debug!("CLIENT LIST failed ({e}): owners are shown without names");
            Vec::new()
        }
    }
}

/// `clients` sorted by id, the first connection of each.
fn one_per_client(mut clients: Vec<ConnectedClient>) -> Vec<ConnectedClient> {
    clients.sort_by(|a, b| a.id.cmp(&b.id));
    clients.dedup_by(|later, earlier| later.id == earlier.id);
    clients
}

/// The client id an owner id starts with (`<client id>:<thread>...`).
pub(super) fn client_id_of(owner: &str) -> &str {
    owner.split(':').next().unwrap_or_default()
}

/// The redlatch clients in one server's `CLIENT LIST`: connections named `<name>:<client
/// id>` (see `ClientBuilder::name`), one entry per connection.
pub(crate) fn parse_client_list(list: &str) -> Vec<ConnectedClient> {
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            let (name, id) = field("name")?.rsplit_once(':')?;
            uuid::Uuid::try_parse(id).ok()?;
            Some(ConnectedClient {
                id: id.to_string(),
                name: name.to_string(),
                addr: field("addr")?.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_named_by_redlatch_are_read_from_client_list() {
        let id = "4e73c6e3-5b6f-4a8c-9d3e-0123456789ab";
        let list = format!(
            "id=3 addr=10.0.0.7:53422 laddr=10.0.0.1:6379 fd=8 name=api@host-7:{id} age=2\n\
             id=4 addr=10.0.0.8:1000 laddr=10.0.0.1:6379 fd=9 name= age=1\n\
             id=5 addr=10.0.0.9:1001 laddr=10.0.0.1:6379 fd=9 name=other:not-a-uuid age=1\n\
             id=6 addr=10.0.0.7:53423 laddr=10.0.0.1:6379 fd=10 name=a:b:{id} age=1"
        );
        let clients = parse_client_list(&list);
        assert_eq!(clients.len(), 2);
        assert_eq!(clients[0].id, id);
        assert_eq!(clients[0].name, "api@host-7");
        assert_eq!(clients[0].addr, "10.0.0.7:53422");
        assert_eq!(clients[1].name, "a:b", "a name may hold colons");
        assert_eq!(client_id_of(&format!("{id}:12:r")), id);
    }
}
