public import APNSCore
import APNSWire
import NIOConcurrencyHelpers
import NIOCore

/// A batch of requests started without a task or continuation per request: the streams free
/// now are leased in one lock section per credential, each connection gets its share in one hop
/// to its event loop, and the answers are handed to the caller from there. Measured with
/// `herald-bench sender` (BENCHMARKS.md): a task, two continuations and two hops per request
/// were most of what set the sender apart from h2load.
extension APNSHTTP2Client {
    /// Sends every request, calling `answered` on the connections' event loops; what cannot
    /// take that path (no free stream, a credential being replaced, a 403 ExpiredProviderToken
    /// to retry with a new token, a stream that could not be opened) goes through
    /// ``send(_:environment:deadline:)`` in a child task, with the same guarantees.
    public func sendAll(
        _ requests: [APNSRequest],
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async {
        // Past the deadline or cancelled: the single path says so per request.
        let nioDeadline = Task.isCancelled ? nil : NIODeadline.fromContinuousClock(deadline)
        let (leased, alone) =
            nioDeadline == nil
            ? ([], Array(requests.indices)) : leaseFreeStreams(for: requests, environment: environment)
        await withDiscardingTaskGroup { group in
            for index in alone {
                group.addTask { await self.send(requests[index], at: index, environment: environment, deadline: deadline, answered: answered) }
            }
            guard let nioDeadline, !leased.isEmpty else { return }
            let again = await start(leased, of: requests, deadline: nioDeadline, answered: answered)
            for retry in again {
                group.addTask {
                    let index = retry.index
                    guard let first = retry.expired else {
                        return await self.send(requests[index], at: index, environment: environment, deadline: deadline, answered: answered)
                    }
                    do {
                        let response = try await self.sendAgain(requests[index], environment: environment, deadline: deadline, afterExpired: first)
                        answered(index, .success(response))
                    } catch {
                        answered(index, .failure(error))
                    }
                }
            }
        }
    }

    private func send(
        _ request: APNSRequest,
        at index: Int,
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async {
        do {
            answered(index, .success(try await send(request, environment: environment, deadline: deadline)))
        } catch {
            answered(index, .failure(error))
        }
    }

    /// Leases a stream for each request whose credential's pool has one free now, one lock
    /// section per pool; returns those and the indexes of the rest.
    private func leaseFreeStreams(
        for requests: [APNSRequest],
        environment: APNSEnvironment
    ) -> (leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)], rest: [Int]) {
        var byPool: [ObjectIdentifier: (pool: CredentialPool, indexes: [Int])] = [:]
        var rest: [Int] = []
        for (index, request) in requests.enumerated() {
            // Routing errors (no credential) are thrown again, and answered, by the single path.
            guard let pool = try? pool(for: request) else {
                rest.append(index)
                continue
            }
            byPool[ObjectIdentifier(pool), default: (pool, [])].indexes.append(index)
        }
        var leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)] = []
        for (pool, indexes) in byPool.values {
            let connections = pool.state.withLockedValue { $0.leaseFreeStreams(environment, upTo: indexes.count) }
            leased += zip(indexes, connections).map { ($0, $1, pool) }
            rest += indexes.dropFirst(connections.count)
        }
        return (leased, rest)
    }

    /// A request of a batch to send again after its first answer.
    private struct SecondTry: Sendable {
        var index: Int
        /// The first answer and its connection, for a 403 ExpiredProviderToken; nil when the
        /// stream could not be opened and the whole single path runs again.
        var expired: (outcome: APNSStreamOutcome, connection: APNSConnection)?
    }

    /// What a batch's streams still owe: the count of unanswered ones, the requests to try
    /// again, and the waiting caller.
    private struct BatchProgress: Sendable {
        var unanswered: Int
        var again: [SecondTry] = []
        var waiter: CheckedContinuation<[SecondTry], Never>?
    }

    /// Starts the leased streams, one hop per connection, and returns once each was answered
    /// (each answer already given to `answered`), with the requests to try again.
    private func start(
        _ leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)],
        of requests: [APNSRequest],
        deadline: NIODeadline,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async -> [SecondTry] {
        let progress = NIOLockedValueBox(BatchProgress(unanswered: leased.count))
        let streams = leased.map { (index: $0.index, connection: $0.connection, pool: $0.pool, requestID: $0.connection.nextRequestID()) }
        let byConnection = Dictionary(grouping: streams, by: { ObjectIdentifier($0.connection) })
        @Sendable func finish(
            _ stream: (index: Int, connection: APNSConnection, pool: CredentialPool, requestID: UInt64), _ result: Result<APNSStreamOutcome, any Error>
        ) {
            releaseStream(on: stream.connection, status: try? result.get().response.status, pool: stream.pool)
            var again: SecondTry?
            switch result {
            case .success(let outcome) where Self.tokenExpired(outcome, on: stream.connection):
                again = SecondTry(index: stream.index, expired: (outcome, stream.connection))
            case .failure(is APNSStreamNotOpened):
                again = SecondTry(index: stream.index, expired: nil)
            default:
                answered(stream.index, result.map(\.response))
            }
            let last = progress.withLockedValue { progress -> (CheckedContinuation<[SecondTry], Never>, [SecondTry])? in
                if let again { progress.again.append(again) }
                progress.unanswered -= 1
                guard progress.unanswered == 0, let waiter = progress.waiter else { return nil }
                progress.waiter = nil
                return (waiter, progress.again)
            }
            if let (waiter, again) = last { waiter.resume(returning: again) }
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                progress.withLockedValue { $0.waiter = continuation }
                for share in byConnection.values {
                    let connection = share[0].connection
                    connection.start(
                        share.map { stream in (stream.requestID, requests[stream.index], .callback { finish(stream, $0) }) },
                        deadline: deadline
                    )
                }
            }
        } onCancel: {
            for share in byConnection.values { share[0].connection.cancel(share.map(\.requestID)) }
        }
    }
}
