import Foundation
import KafkaMessages
import KafkaTransport
import Synchronization

/// The urgent side of the campaign shape: sign-in alerts (priority 10) on push.requests at a
/// steady rate, each to one of the campaign's users, with their produce -> result latency kept
/// apart for the phase they were produced in (idle Herald, then during the campaign).
final class UrgentLoad: Sendable {
    /// The phases the latencies are reported for.
    enum Phase: Int, Sendable {
        case idle, campaign
    }

    static let eventPrefix = "urgent-"

    let perSecond: Int
    private let topic: String
    private let bundleID: String
    private let users: Int
    private struct State {
        var produced: [Int: (at: Int64, phase: Phase)] = [:]
        var answered: Set<Int> = []
        var latencies: [Phase: [Int64]] = [:]
        /// The results' `latency_ms` (Herald's poll to APNs' answer), per phase.
        var untilAnswered: [Phase: [Int64]] = [:]
        var results = 0
    }
    private let state = Mutex(State())

    /// `users`: how many of the workload's users (`u0`...) the alerts go to, in turn.
    init(perSecond: Int, topic: String, bundleID: String, users: Int) {
        self.perSecond = perSecond
        self.topic = topic
        self.bundleID = bundleID
        self.users = max(1, users)
    }

    /// Produces alerts at the rate, numbered from `first`, until `duration` passes (nil: until
    /// cancelled); returns the next number.
    func produce(with producer: KafkaProducer, phase: Phase, from first: Int, for duration: Duration?) async throws -> Int {
        let clock = ContinuousClock()
        let start = clock.now
        var index = first
        while duration.map({ clock.now - start < $0 }) ?? true {
            try await clock.sleep(until: start + .nanoseconds(Int64(index - first) * 1_000_000_000 / Int64(perSecond)))
            let id = "\(Self.eventPrefix)\(index)"
            let json =
                #"{"id":"\#(id)","user_ids":["u\#(index % users)"],"topic":"\#(bundleID)","priority":10,"payload":{"aps":{"alert":{"title":"Code","body":"\#(index)"}}}}"#
            state.withLock { $0.produced[index] = (wallMilliseconds(), phase) }
            try await producer.send(KafkaOutgoingMessage(topic: topic, key: Array(id.utf8), value: Array(json.utf8)))
            index += 1
        }
        return index
    }

    /// Takes a push.results record of an alert (false: not one of these); a result's time is its
    /// Kafka timestamp, and an event's latency is taken at its first result.
    func handle(eventID: String, resultAt time: Int64, heraldMilliseconds: Int64?) -> Bool {
        guard eventID.hasPrefix(Self.eventPrefix), let index = Int(eventID.dropFirst(Self.eventPrefix.count)) else { return false }
        state.withLock { state in
            state.results += 1
            if let phase = state.produced[index]?.phase, let heraldMilliseconds { state.untilAnswered[phase, default: []].append(heraldMilliseconds) }
            guard let produced = state.produced[index], state.answered.insert(index).inserted else { return }
            state.latencies[produced.phase, default: []].append(time - produced.at)
        }
        return true
    }

    /// Results read so far (one per device), and whether every alert produced has one.
    var progress: (results: Int, allAnswered: Bool) {
        state.withLock { ($0.results, $0.answered.count == $0.produced.count) }
    }

    /// "p50 / p99 / max ms (n alerts)" of a phase, and its p99.
    func summary(_ phase: Phase) -> (text: String, p99: Int64) {
        let (values, answered) = state.withLock { (($0.latencies[phase] ?? []).sorted(), ($0.untilAnswered[phase] ?? []).sorted()) }
        guard !values.isEmpty else { return ("no alerts", 0) }
        let text = """
            p50 \(percentile(values, 0.5)) ms, p99 \(percentile(values, 0.99)) ms, max \(values.last!) ms (\(values.count) alerts; \
            herald's poll -> APNs answer p50 \(percentile(answered, 0.5)) ms, p99 \(percentile(answered, 0.99)) ms)
            """
        return (text, percentile(values, 0.99))
    }
}
