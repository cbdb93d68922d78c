import PushPipeline
import Synchronization
import Testing

/// A clock that only moves when told to; `sleep` jumps to its end.
final class ManualClock: Clock, Sendable {
    struct Instant: InstantProtocol {
        var offset: Duration

        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private let current = Mutex(Instant(offset: .zero))

    var now: Instant { current.withLock { $0 } }
    var minimumResolution: Duration { .nanoseconds(1) }

    func advance(by duration: Duration) {
        current.withLock { $0 = $0.advanced(by: duration) }
    }

    func sleep(until deadline: Instant, tolerance: Duration?) async throws {
        try Task.checkCancellation()
        current.withLock { $0 = max($0, deadline) }
    }
}

@Suite struct LoadSheddingGateTests {
    let policy = LoadSheddingPolicy(initialPause: .milliseconds(100), maximumPause: .seconds(1), halfLife: .seconds(2))

    @Test func healthyAPNsMeansNoPause() {
        let clock = ManualClock()
        let gate = LoadSheddingGate(policy: policy, clock: clock)
        #expect(gate.currentPause == .zero)
        var generator = SystemRandomNumberGenerator()
        #expect(gate.pause(until: clock.now.advanced(by: .seconds(60)), using: &generator) == .zero)
    }

    @Test func overloadDoublesThePauseUpToTheCap() {
        let clock = ManualClock()
        let gate = LoadSheddingGate(policy: policy, clock: clock)
        gate.recordOverload()
        #expect(gate.currentPause == .milliseconds(100))
        gate.recordOverload()
        #expect(gate.currentPause == .milliseconds(200))
        gate.recordOverload()
        gate.recordOverload()
        #expect(gate.currentPause == .milliseconds(800))
        gate.recordOverload()
        #expect(gate.currentPause == .seconds(1))
    }

    @Test func pauseHalvesEveryHalfLifeAndEndsWhenNegligible() {
        let clock = ManualClock()
        let gate = LoadSheddingGate(policy: policy, clock: clock)
        for _ in 0..<4 { gate.recordOverload() }  // 800 ms
        clock.advance(by: .seconds(2))
        #expect(abs(gate.currentPause - .milliseconds(400)) < .microseconds(10))
        clock.advance(by: .seconds(1))
        #expect(abs(gate.currentPause - .milliseconds(283)) < .milliseconds(1))  // 800 · 2^-1.5
        clock.advance(by: .seconds(60))
        #expect(gate.currentPause == .zero)

        // Overload after the decay starts again from the decayed pause (here: the initial one).
        gate.recordOverload()
        #expect(gate.currentPause == .milliseconds(100))
    }

    @Test func waitIsAJitteredShareOfThePauseAndStopsAtTheDeadline() {
        let clock = ManualClock()
        let gate = LoadSheddingGate(policy: policy, clock: clock)
        for _ in 0..<4 { gate.recordOverload() }  // 800 ms
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20 {
            let before = gate.currentPause
            let pause = gate.pause(until: clock.now.advanced(by: .seconds(60)), using: &generator)
            #expect(pause >= before * 0.5 - .microseconds(1))
            #expect(pause <= before)
            clock.advance(by: pause)
        }

        gate.recordOverload()
        #expect(gate.pause(until: clock.now.advanced(by: .milliseconds(1)), using: &generator) == .milliseconds(1))
    }

    @Test func disabledPolicyNeverPauses() {
        let gate = LoadSheddingGate(policy: .disabled, clock: ManualClock())
        for _ in 0..<10 { gate.recordOverload() }
        #expect(gate.currentPause == .zero)
    }
}

private func abs(_ duration: Duration) -> Duration {
    duration < .zero ? .zero - duration : duration
}
