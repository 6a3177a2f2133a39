//! The split ledger's SQL, in one place: its tables ([`schema`], migrations applied with
//! the state store's) and every statement it runs ([`queries`]). The rules these carry out,
//! and the Rust values their rows decode to, are `crate::cluster::ledger`'s; they live here,
//! in the PostgreSQL layer, because the migrations that create the tables must (the state
//! store applies them, and it knows nothing of the cluster).

pub mod queries;
pub mod schema;
