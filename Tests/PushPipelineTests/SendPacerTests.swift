@testable import PushPipeline
import Testing

struct SendPacerTests {
    @Test func sendsAskingAtOnceAreSpacedOneIntervalApart() {
        var schedule = SendPacer.Schedule(perSecond: 100)
        let now = ContinuousClock.now
        let waits = (0..<5).map { _ in schedule.reserve(at: now) }
        #expect(waits == [.zero, .milliseconds(10), .milliseconds(20), .milliseconds(30), .milliseconds(40)])
    }

    @Test func idleTimeIsNotSavedUpForABurst() {
        var schedule = SendPacer.Schedule(perSecond: 100)
        let start = ContinuousClock.now
        #expect(schedule.reserve(at: start) == .zero)
        // A second later (99 slots unused): the next sends are spaced again, not let through at once.
        let later = start + .seconds(1)
        let waits = (0..<3).map { _ in schedule.reserve(at: later) }
        #expect(waits == [.zero, .milliseconds(10), .milliseconds(20)])
    }

    @Test func aSendAskingAfterItsSlotWaitsNothing() {
        var schedule = SendPacer.Schedule(perSecond: 1000)
        let start = ContinuousClock.now
        #expect(schedule.reserve(at: start) == .zero)
        #expect(schedule.reserve(at: start + .microseconds(1500)) == .zero)
        #expect(schedule.reserve(at: start + .microseconds(1500)) == .milliseconds(1))
    }
}
