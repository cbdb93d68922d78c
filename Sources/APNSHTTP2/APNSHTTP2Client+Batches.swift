public import APNSCore
import PushCore
import NIOConcurrencyHelpers
import NIOCore
import APNSWire
import HTTP2Transport

/// A batch of requests started as one ``HTTP2StreamBatch``: the streams free now are leased in
/// one lock section per credential, each connection gets its share in one hop to its event loop,
/// the rest wait in their pools for a stream, and the answers are handed to the caller from there.
extension APNSHTTP2Client {
    /// Sends every request, calling `answered` on the connections' event loops; a request that
    /// finds no free stream waits in its pool without a task and starts where a stream is freed.
    /// What cannot take that path (no credential, a credential being replaced, no stream before
    /// the deadline, a 403 ExpiredProviderToken to retry with a new token, a stream that could
    /// not be opened) goes through ``send(_:environment:deadline:)`` in a child task, with the
    /// same guarantees.
    public func sendAll(
        _ requests: [APNSRequest],
        environment: APNSEnvironment,
        deadline: ContinuousClock.Instant,
        answered: @escaping @Sendable (Int, Result<APNSResponse, any Error>) -> Void
    ) async {
        // Past the deadline or cancelled: the single path says so per request.
        let nioDeadline = Task.isCancelled ? nil : NIODeadline.fromContinuousClock(deadline)
        let (leased, waiting, alone) =
            nioDeadline == nil
            ? ([], [], Array(requests.indices)) : leaseFreeStreams(for: requests, environment: environment)
        let deadlineOfStreams = nioDeadline ?? .now()
        // A batch comes from one lane: its first request's precedence is every request's.
        let precedence = requests.first?.precedence ?? .urgent
        await Batch.send(
            leased.map { ($0.index, requests[$0.index], $0.connection, $0.pool) },
            waiting: waiting.map { ($0.index, requests[$0.index], $0.pool, APNSSingleSend(index: $0.index, expired: nil)) },
            deadline: deadlineOfStreams,
            alone: alone.map { APNSSingleSend(index: $0, expired: nil) },
            pools: Batch.Pools(
                wait: { self.wait($0, environment: environment, deadline: deadlineOfStreams, precedence: precedence) },
                stopWaiting: { for (pool, id) in $0 { self.cancelWaiter(id, environment: environment, pool: pool) } }
            )
        ) { stream, result in
            self.releaseStream(on: stream.connection, status: try? result.get().response.status, pool: stream.context)
            switch result {
            case .success(let outcome) where Self.tokenExpired(outcome, on: stream.connection):
                return APNSSingleSend(index: stream.index, expired: (outcome, stream.connection))
            case .failure(is HTTP2StreamNotOpened):
                return APNSSingleSend(index: stream.index, expired: nil)
            default:
                answered(stream.index, result.map(\.response))
                return nil
            }
        } retry: { retry in
            let request = requests[retry.index]
            do {
                let response =
                    if let first = retry.expired {
                        try await self.sendAgain(request, environment: environment, deadline: deadline, afterExpired: first)
                    } else {
                        try await self.send(request, environment: environment, deadline: deadline)
                    }
                answered(retry.index, .success(response))
            } catch {
                answered(retry.index, .failure(error))
            }
        }
    }

    private typealias Batch = HTTP2StreamBatch<APNSConnection, CredentialPool, APNSSingleSend>

    /// Leases a stream for each request whose credential's pool has one free now, one lock
    /// section per pool; returns those, the requests to wait in their pools for a stream, and
    /// the indexes of the rest (no credential serves them).
    private func leaseFreeStreams(
        for requests: [APNSRequest],
        environment: APNSEnvironment
    ) -> (leased: [(index: Int, connection: APNSConnection, pool: CredentialPool)], waiting: [(index: Int, pool: CredentialPool)], rest: [Int]) {
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
        var waiting: [(index: Int, pool: CredentialPool)] = []
        for (pool, indexes) in byPool.values {
            // A batch comes from one lane: its first request's precedence is every request's.
            let precedence = requests[indexes[0]].precedence
            let connections = pool.state.withLockedValue {
                $0.leaseFreeStreams(environment, upTo: indexes.count, precedence: precedence, preferring: \.isOnCurrentEventLoop)
            }
            leased += zip(indexes, connections).map { ($0, $1, pool) }
            waiting += indexes.dropFirst(connections.count).map { ($0, pool) }
        }
        return (leased, waiting, rest)
    }

    /// A request of a batch to send through the single path (alone, or again after its
    /// provider token expired).
    private struct APNSSingleSend: Sendable {
        var index: Int
        /// The first answer and its connection, for a 403 ExpiredProviderToken; nil when the
        /// whole single path runs (no stream was leased, or it could not be opened).
        var expired: (outcome: APNSStreamOutcome, connection: APNSConnection)?
    }
}
