//! The status page's login sessions: `POST /login` trades a token for a random session
//! id, which is all the cookie holds. The token stays in the server's memory, so a cookie
//! that leaks (a proxy's log, a shared browser profile) is not the token, ends at logout
//! or after [`SESSION_LIFETIME`], and is gone when the server restarts.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a login lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// Sessions kept at once; a login past them ends the oldest.
const MOST_SESSIONS: usize = 1024;
/// Sessions of one token; a login past them ends that token's oldest (so that one token's
/// logins never end another's sessions).
const MOST_SESSIONS_PER_TOKEN: usize = 16;

struct Session {
    token: String,
    started: Instant,
}

/// Session ids and the tokens they stand for.
#[derive(Default)]
pub struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// A new session for `token`: its id, 32 random bytes in hex.
    pub fn start(&self, token: String) -> std::io::Result<String> {
        let mut random = [0u8; 32];
        getrandom::getrandom(&mut random).map_err(|err| std::io::Error::other(err.to_string()))?;
        let id: String = random.iter().map(|byte| format!("{byte:02x}")).collect();
        let mut by_id = self.by_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        by_id.retain(|_, session| session.started.elapsed() < SESSION_LIFETIME);
        let of_token = by_id.values().filter(|session| session.token == token).count();
        if of_token >= MOST_SESSIONS_PER_TOKEN || by_id.len() >= MOST_SESSIONS {
            let oldest = (by_id.iter())
                .filter(|(_, session)| of_token < MOST_SESSIONS_PER_TOKEN || session.token == token)
                .min_by_key(|(_, session)| session.started)
                .map(|(id, _)| id.clone());
            by_id.remove(&oldest.expect("sessions are kept"));
        }
        by_id.insert(id.clone(), Session { token, started: Instant::now() });
        Ok(id)
    }

    /// The token session `id` stands for, while it lasts.
    pub fn token(&self, id: &str) -> Option<String> {
        let by_id = self.by_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let session = by_id.get(id)?;
        (session.started.elapsed() < SESSION_LIFETIME).then(|| session.token.clone())
    }

    /// Ends session `id` (a logout).
    pub fn end(&self, id: &str) {
        self.by_id.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::Sessions;

    #[test]
    fn a_session_stands_for_its_token_until_it_ends() {
        let sessions = Sessions::default();
        let id = sessions.start("secret".into()).unwrap();
        assert_eq!(id.len(), 64);
        assert!(!id.contains("secret"));
        assert_ne!(sessions.start("secret".into()).unwrap(), id, "ids are random");
        assert_eq!(sessions.token(&id).as_deref(), Some("secret"));
        sessions.end(&id);
        assert_eq!(sessions.token(&id), None);
    }

    #[test]
    fn past_the_most_sessions_the_oldest_ends() {
        let sessions = Sessions::default();
        let first = sessions.start("t0".into()).unwrap();
        let ids: Vec<String> =
            (0..super::MOST_SESSIONS).map(|i| sessions.start(format!("t{}", 1 + i % 100)).unwrap()).collect();
        assert_eq!(sessions.token(&first), None);
        assert!(ids.iter().all(|id| sessions.token(id).is_some()));
    }

    #[test]
    fn one_tokens_logins_end_its_own_sessions_only() {
        let sessions = Sessions::default();
        let other = sessions.start("other".into()).unwrap();
        let ids: Vec<String> = (0..100).map(|_| sessions.start("many".into()).unwrap()).collect();
        assert_eq!(sessions.token(&other).as_deref(), Some("other"));
        let kept = ids.iter().filter(|id| sessions.token(id).is_some()).count();
        assert_eq!(kept, super::MOST_SESSIONS_PER_TOKEN);
        assert!(sessions.token(ids.last().unwrap()).is_some(), "the newest is kept");
    }
}
