//! The window's room and attaching.

use super::*;

/// A window of chunks `[0, 10)`, `[10, 20)`, `[20, 30)` of 100 bytes each, made
/// `age` ago.
fn window_of_age(seats: &[(u64, u64, bool)], age: std::time::Duration) -> Window {
    let made = std::time::Instant::now() - age;
    let chunk = |first: u64| WindowChunk {
        first,
        end: first + 10,
        elements: Vec::new(),
        state_after: None,
        bytes: 100,
        _reserved: Default::default(),
        made,
    };
    let seats = seats.iter().map(|&(id, position, attached)| (id, (position, attached))).collect();
    Window { chunks: [0, 10, 20].map(chunk).into(), end: 30, bytes: 300, seats, ..Window::default() }
}

fn window(seats: &[(u64, u64, bool)]) -> Window {
    window_of_age(seats, JOIN_GRACE * 2)
}

fn firsts(window: &Window) -> Vec<u64> {
    window.chunks.iter().map(|chunk| chunk.first).collect()
}

#[test]
fn chunks_stay_from_the_slowest_seat_on_within_the_limit() {
    // The slowest seat, attached or not, keeps what it still needs.
    let mut w = window(&[(0, 25, true), (1, 12, false)]);
    w.make_room(1000);
    assert_eq!(firsts(&w), [10, 20]);
    // Over the limit the oldest go, needed or not: that seat reads alone.
    w.make_room(100);
    assert_eq!((firsts(&w), w.bytes), (vec![20], 100));
    assert_eq!(w.oldest(), 20);
}

#[test]
fn chunks_every_seat_passed_stay_a_while_for_jobs_that_come_late() {
    let mut w = window_of_age(&[(0, 25, true)], std::time::Duration::ZERO);
    w.make_room(1000);
    assert_eq!(firsts(&w), [0, 10, 20], "a job coming now starts from the window");
    w.make_room(200);
    assert_eq!(firsts(&w), [10, 20], "the limit holds");
}

#[test]
fn a_seat_attaches_inside_the_window_and_moves_an_unattended_one() {
    let w = window(&[(0, 25, true)]);
    assert_eq!(w.attachable(0), Some(true));
    assert_eq!(w.attachable(30), Some(true), "where the producer is");
    assert_eq!(w.attachable(31), Some(false), "ahead of the producer, someone attached");
    let mut w = window(&[(0, 25, false)]);
    w.make_room(100);
    assert_eq!(w.attachable(5), None, "behind it, nobody attached: the window may move there");
    w.failed = Some(ServeError::Internal("x".into()));
    assert_eq!(w.attachable(25), None, "a failed producer is read again by the first to come back");
    let w = Window { failed: Some(ServeError::Internal("x".into())), ..window(&[(0, 25, true)]) };
    assert_eq!(w.attachable(25), Some(false), "not while a seat is attached");
}
