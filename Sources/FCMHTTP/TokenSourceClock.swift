/// The instants the access token source reads and sleeps until: the continuous clock when Herald
/// runs, a clock the test moves when a unit test checks the refresh schedule.
/// Not Swift's `Clock`: an `any Clock` cannot fix its `Instant`, and a token's expiry is a
/// `ContinuousClock.Instant`.
package protocol TokenSourceClock: Sendable {
    /// The current instant.
    var now: ContinuousClock.Instant { get }
    /// Returns at `deadline` by this clock; throws when the task is cancelled first.
    func sleep(until deadline: ContinuousClock.Instant) async throws
}

/// Swift's continuous clock.
package struct ContinuousTokenSourceClock: TokenSourceClock {
    package init() {}
    package var now: ContinuousClock.Instant { .now }
    package func sleep(until deadline: ContinuousClock.Instant) async throws {
        try await Task.sleep(until: deadline, clock: .continuous)
    }
}
