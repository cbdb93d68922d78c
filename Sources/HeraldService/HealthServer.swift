package import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// Serves `/health/live`, `/health/ready` and `/metrics` over HTTP/1.1 on HERALD_HTTP_PORT.
///
/// It keeps answering while Herald drains (the service group stops it last), but from the
/// moment the drain begins (``DrainSignal``) it closes idle keep-alive connections (a Prometheus
/// scraper, a load balancer), answers with `Connection: close` and says `shutting_down` on
/// `/health/ready`, so no client holds the process open.
package final class HealthServer: Service, Sendable {
    /// The open connections, and whether each is answering a request right now.
    private struct Connections {
        var open: [UInt64: (channel: any Channel, answering: Bool)] = [:]
        var nextID: UInt64 = 0
    }

    private let host: String
    private let port: Int
    private let readiness: @Sendable () async -> [String]
    private let metrics: @Sendable () async -> String
    private let drain: DrainSignal
    private let connections = Mutex(Connections())
    private let logger: Logger

    /// - Parameters:
    ///   - readiness: the conditions that keep Herald from doing its job now (database, consumer,
    ///     APNs); empty when it is ready. `/health/ready` names them in its 503 body.
    ///   - metrics: the Prometheus text exposition.
    ///   - drain: raised when the graceful shutdown begins.
    package init(
        host: String = "0.0.0.0",
        port: Int,
        readiness: @escaping @Sendable () async -> [String],
        metrics: @escaping @Sendable () async -> String,
        drain: DrainSignal = DrainSignal(),
        logger: Logger
    ) {
        self.host = host
        self.port = port
        self.readiness = readiness
        self.metrics = metrics
        self.drain = drain
        self.logger = logger
    }

    package func run() async throws {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(
                        wrappingChannelSynchronously: channel
                    )
                }
            }
        logger.info("health and metrics endpoint listening", metadata: ["http.port": "\(port)"])
        drain.onBegin { [self] in
            for channel in connections.withLock({ $0.open.values.filter { !$0.answering }.map(\.channel) }) {
                channel.close(promise: nil)
            }
        }
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                try await server.executeThenClose { connections in
                    for try await connection in connections {
                        group.addTask { await self.serve(connection) }
                    }
                }
            }
        } onGracefulShutdown: { [self] in
            // Last in the drain: nothing is left to report on.
            server.channel.close(promise: nil)
            for channel in connections.withLock({ $0.open.values.map(\.channel) }) { channel.close(promise: nil) }
        }
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        let id = connections.withLock { state in
            state.nextID += 1
            state.open[state.nextID] = (connection.channel, false)
            return state.nextID
        }
        defer { _ = connections.withLock { $0.open.removeValue(forKey: id) } }
        try? await connection.executeThenClose { inbound, outbound in
            for try await part in inbound {
                guard case .head(let request) = part else { continue }
                connections.withLock { $0.open[id]?.answering = true }
                let (status, body) = await answer(path: request.uri)
                let closing = !request.isKeepAlive || drain.hasBegun
                var headers = HTTPHeaders()
                headers.add(name: "content-type", value: "text/plain; version=0.0.4; charset=utf-8")
                headers.add(name: "content-length", value: String(body.utf8.count))
                if closing { headers.add(name: "connection", value: "close") }
                try await outbound.write(.head(HTTPResponseHead(version: request.version, status: status, headers: headers)))
                try await outbound.write(.body(.byteBuffer(ByteBuffer(string: body))))
                try await outbound.write(.end(nil))
                if closing { return }
                // A drain that began while this answer was written found the connection busy.
                connections.withLock { $0.open[id]?.answering = false }
                if drain.hasBegun { return }
            }
        }
    }

    private func answer(path: String) async -> (HTTPResponseStatus, String) {
        switch path.split(separator: "?").first.map(String.init) ?? path {
        case "/health/live": (.ok, "live\n")
        case "/health/ready":
            switch await readiness() {
            case []: (.ok, "ready\n")
            case let unmet: (.serviceUnavailable, "not ready: \(unmet.joined(separator: ", "))\n")
            }
        case "/metrics": (.ok, await metrics())
        default: (.notFound, "not found\n")
        }
    }
}
