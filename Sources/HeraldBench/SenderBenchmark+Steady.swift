import APNSCore
import PushStores
import PushPipeline
import Synchronization

/// The sender at a steady load: batches of a fixed size started at a fixed pace, as a poll
/// batch reaches the sender in `herald run`, each request's latency from its batch's start to
/// its outcome. No broker and no database: what the sender and the mock add on their own.
extension HeraldSenderClient {
    struct SteadyRun {
        var requests: Int
        /// Batch start to outcome, in microseconds, sorted.
        var latencies: [Int64]
        var cpuMicrosecondsPerRequest: Double
    }

    /// Sends `seconds` worth of `rate` requests per second in batches of `batch`, one
    /// ``RetryingSender/deliverAll(_:consumedAt:fence:report:)`` each; throws unless every
    /// request was delivered.
    static func steadyLoad(
        rate: Int,
        batch: Int,
        seconds: Int,
        through sender: RetryingSender,
        requests makeRequests: (Int) -> [APNSRequest]
    ) async throws -> SteadyRun {
        let batches = max(1, rate * seconds / batch)
        let interval = Duration.seconds(batch) / rate
        let prepared = (0..<batches).map { _ in makeRequests(batch).map { (request: $0, environment: APNSEnvironment.production) } }
        let outcomes = SteadyOutcomes()
        let cpuBefore = CPUTime.thisProcess.microseconds
        let start = ContinuousClock.now
        await withDiscardingTaskGroup { group in
            for (index, requests) in prepared.enumerated() {
                try? await Task.sleep(until: start + interval * index, clock: .continuous)
                group.addTask {
                    let started = ContinuousClock.now
                    await sender.deliverAll(requests, consumedAt: started, fence: { _ in .open }) { _, result in
                        outcomes.record(started.duration(to: .now), delivered: (try? result.get())?.status == .delivered)
                    }
                }
            }
        }
        let cpu = CPUTime.thisProcess.microseconds - cpuBefore
        let count = batches * batch
        let (latencies, delivered) = outcomes.collected
        guard delivered == count else { throw SteadyLoadError(delivered: delivered, sent: count) }
        return SteadyRun(requests: count, latencies: latencies.sorted(), cpuMicrosecondsPerRequest: Double(cpu) / Double(count))
    }

    /// The steady load's latencies (µs) and delivered count, recorded where outcomes arrive.
    private final class SteadyOutcomes: Sendable {
        private let state = Mutex<(latencies: [Int64], delivered: Int)>(([], 0))

        func record(_ latency: Duration, delivered: Bool) {
            let microseconds = latency.components.seconds * 1_000_000 + latency.components.attoseconds / 1_000_000_000_000
            state.withLock {
                $0.latencies.append(microseconds)
                if delivered { $0.delivered += 1 }
            }
        }

        var collected: (latencies: [Int64], delivered: Int) { state.withLock { $0 } }
    }

    struct SteadyLoadError: Error, CustomStringConvertible {
        var delivered: Int
        var sent: Int
        var description: String { "Herald's sender delivered \(delivered) of \(sent) requests at the steady load" }
    }
}
