//! Locks that go on after a panic. readerd catches the panics of its decoding and reading
//! threads (a bug, reported as INTERNAL, which fails the reader at fault), and a lock held
//! at that moment is poisoned. What readerd keeps behind a lock is consistent between
//! steps (a reader's state stays as it was before the record), so every lock is taken
//! through these, which take a poisoned lock as it is instead of failing every later user.
//! [`panic_message`] says what a caught panic said.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A mutex locked, or its value taken, whether or not a panic poisoned it.
pub trait MutexUnpoisoned<T: ?Sized> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> MutexUnpoisoned<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A read-write lock taken whether or not a panic poisoned it.
pub trait RwLockUnpoisoned<T: ?Sized> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T>;
    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockUnpoisoned<T> for RwLock<T> {
    fn read_unpoisoned(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_unpoisoned(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A mutex's value, whether or not a panic poisoned it.
pub fn into_inner_unpoisoned<T>(mutex: Mutex<T>) -> T {
    mutex.into_inner().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `work`, catching a panic in it: `Err` with what the panic said. Each caller maps
/// that to its own layer's error (a damaged file, a failed reader).
pub fn catch_panic<T>(work: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).map_err(|payload| panic_message(payload.as_ref()))
}

/// What a caught panic says (its `&str` or `String` payload; empty for another).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    (payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_taken_as_the_panic_left_it() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let rwlock = std::sync::Arc::new(RwLock::new(1));
        let (m, r) = (mutex.clone(), rwlock.clone());
        let _ = std::thread::spawn(move || {
            let (mut a, mut b) = (m.lock().unwrap(), r.write().unwrap());
            (*a, *b) = (2, 2);
            panic!("poison both");
        })
        .join();
        assert!(mutex.is_poisoned() && rwlock.is_poisoned());
        assert_eq!(*mutex.lock_unpoisoned(), 2);
        assert_eq!(*rwlock.read_unpoisoned(), 2);
        *rwlock.write_unpoisoned() = 3;
        assert_eq!(*rwlock.read_unpoisoned(), 3);
        let mutex = std::sync::Arc::into_inner(mutex).unwrap();
        assert_eq!(into_inner_unpoisoned(mutex), 2);
    }
}
