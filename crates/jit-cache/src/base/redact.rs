//! What a remote's URL may show in messages: one redaction for every tier.

/// `url` without its user information and query, which may carry a password or a token:
/// `redis://reader:secret@host:6379/2?x=y` becomes `redis://host:6379/2`. Every remote tier's
/// errors name their URL or endpoint only through this.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let rest = rest.split_once(['?', '#']).map_or(rest, |(path, _)| path);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{rest}")
}
