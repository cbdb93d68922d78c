import Logging
import HTTP2TLS
import HTTP2Transport

/// One HTTP/2 connection to FCM: the shared transport's connection with ``FCMExchange``, pooled
/// by ``FCMHTTP2Transport``.
typealias FCMConnection = HTTP2ExchangeConnection<FCMExchange, HTTP2SoleEndpoint>

/// Everything needed to open connections to FCM; built once per client.
struct FCMConnectionFactory: Sendable {
    var connector: HTTP2TLSConnector
    var endpoint: HTTP2ServerAddress
    var maximumAnswerBytes: Int

    /// Connects, completes TLS (ALPN h2) and waits for the server's first SETTINGS frame.
    /// Returns the connection and the server's stream limit.
    func connect(
        id: Int,
        logger: Logger,
        onEvent: @escaping @Sendable (HTTP2ConnectionEvent) -> Void
    ) async throws -> (FCMConnection, streamLimit: Int) {
        let maximumAnswerBytes = self.maximumAnswerBytes
        return try await FCMConnection.connect(
            id: id, endpoint: .sole, address: endpoint, connector: connector, logger: logger, onEvent: onEvent
        ) { configuration in
            FCMExchange(authority: configuration.authority, maximumAnswerBytes: maximumAnswerBytes)
        }
    }
}
