package import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// Serves `/health/live`, `/health/ready` and `/metrics` over HTTP/1.1 on HERALD_HTTP_PORT.
package final class HealthServer: Service, Sendable {
    private let host: String
    private let port: Int
    private let readiness: @Sendable () async -> [String]
    private let metrics: @Sendable () async -> String
    private let logger: Logger

    /// - Parameters:
    ///   - readiness: the conditions that keep Herald from doing its job now (database, consumer,
    ///     APNs); empty when it is ready. `/health/ready` names them in its 503 body.
    ///   - metrics: the Prometheus text exposition.
    package init(
        host: String = "0.0.0.0",
        port: Int,
        readiness: @escaping @Sendable () async -> [String],
        metrics: @escaping @Sendable () async -> String,
        logger: Logger
    ) {
        self.host = host
        self.port = port
        self.readiness = readiness
        self.metrics = metrics
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
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                try await server.executeThenClose { connections in
                    for try await connection in connections {
                        group.addTask { await self.serve(connection) }
                    }
                }
            }
        } onGracefulShutdown: {
            server.channel.close(promise: nil)
        }
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        try? await connection.executeThenClose { inbound, outbound in
            for try await part in inbound {
                guard case .head(let request) = part else { continue }
                let (status, body) = await answer(path: request.uri)
                var headers = HTTPHeaders()
                headers.add(name: "content-type", value: "text/plain; version=0.0.4; charset=utf-8")
                headers.add(name: "content-length", value: String(body.utf8.count))
                try await outbound.write(.head(HTTPResponseHead(version: request.version, status: status, headers: headers)))
                try await outbound.write(.body(.byteBuffer(ByteBuffer(string: body))))
                try await outbound.write(.end(nil))
                if !request.isKeepAlive { return }
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
