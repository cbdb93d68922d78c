import Crypto
import Foundation
import Logging
import MockAPNS
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

/// One answer as the test client saw it.
struct TestResponse: Sendable {
    var status: Int
    var headers: HPACKHeaders
    var body: [UInt8]

    var apnsID: String? { self.headers.first(name: "apns-id") }

    /// The JSON error body APNs sends with every non-200 answer.
    struct ErrorBody: Decodable {
        var reason: String
        var timestamp: Int64?
    }

    var errorBody: ErrorBody? { try? JSONDecoder().decode(ErrorBody.self, from: Data(self.body)) }
    var reason: String? { self.errorBody?.reason }
    var timestamp: Int64? { self.errorBody?.timestamp }
}

/// A minimal real HTTP/2-over-TLS client, independent of Herald's own transport, that trusts the
/// mock's CA and verifies its certificate against the host name (or the IP address).
struct TestHTTP2Client: Sendable {
    let channel: any Channel
    let multiplexer: NIOHTTP2Handler.StreamMultiplexer
    /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS, once its first SETTINGS frame arrived.
    let advertisedMaxConcurrentStreams: EventLoopFuture<Int?>
    /// Connection-level frames the server sent (SETTINGS, GOAWAY).
    let connectionFrames: ConnectionFrameLog

    /// Connects to 127.0.0.1:`port`; `serverHostname` `nil` verifies the IP SAN instead of a name.
    static func connect(port: Int, caPath: String, serverHostname: String?) async throws -> TestHTTP2Client {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(caPath)
        tls.certificateVerification = .fullVerification
        tls.applicationProtocols = ["h2"]
        let sslContext = try NIOSSLContext(configuration: tls)

        return try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let pipeline = channel.pipeline.syncOperations
                    try pipeline.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: serverHostname))
                    let multiplexer = try pipeline.configureHTTP2Pipeline(
                        mode: .client,
                        connectionConfiguration: .init(),
                        streamConfiguration: .init()
                    ) { stream in stream.eventLoop.makeSucceededVoidFuture() }
                    let settingsPromise = channel.eventLoop.makePromise(of: Int?.self)
                    try pipeline.addHandler(SettingsObserver(promise: settingsPromise))
                    let frames = ConnectionFrameLog()
                    try pipeline.addHandler(ConnectionFrameRecorder(log: frames))
                    return TestHTTP2Client(
                        channel: channel,
                        multiplexer: multiplexer,
                        advertisedMaxConcurrentStreams: settingsPromise.futureResult,
                        connectionFrames: frames
                    )
                }
            }
    }

    /// Sends one request on a new stream and waits for the whole answer.
    func send(
        method: String = "POST",
        path: String,
        headers extraHeaders: [(String, String)] = [],
        payload: [UInt8]
    ) async throws -> TestResponse {
        let responsePromise = self.channel.eventLoop.makePromise(of: TestResponse.self)
        let stream = try await self.multiplexer.createStreamChannel { stream in
            stream.eventLoop.makeCompletedFuture {
                try stream.pipeline.syncOperations.addHandler(ResponseCollector(promise: responsePromise))
            }
        }.get()

        var headers = HPACKHeaders()
        headers.add(name: ":method", value: method)
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":authority", value: "localhost")
        headers.add(name: ":path", value: path)
        for (name, value) in extraHeaders { headers.add(name: name, value: value) }

        if payload.isEmpty {
            try await stream.writeAndFlush(HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: true))).get()
        } else {
            stream.write(HTTP2Frame.FramePayload.headers(.init(headers: headers)), promise: nil)
            let body = HTTP2Frame.FramePayload.data(.init(data: .byteBuffer(ByteBuffer(bytes: payload)), endStream: true))
            try await stream.writeAndFlush(body).get()
        }
        return try await responsePromise.futureResult.get()
    }

    /// A push to `/3/device/<token>` with the usual APNs headers.
    func push(
        token: String,
        authorization: String?,
        topic: String? = "com.example.app",
        pushType: String? = "alert",
        apnsID: String? = nil,
        extraHeaders: [(String, String)] = [],
        payload: [UInt8] = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
    ) async throws -> TestResponse {
        var headers: [(String, String)] = []
        if let authorization { headers.append(("authorization", "bearer \(authorization)")) }
        if let topic { headers.append(("apns-topic", topic)) }
        if let pushType { headers.append(("apns-push-type", pushType)) }
        if let apnsID { headers.append(("apns-id", apnsID)) }
        headers += extraHeaders
        return try await self.send(path: "/3/device/\(token)", headers: headers, payload: payload)
    }

    func close() async {
        try? await self.channel.close().get()
    }
}

/// Collects one response (HEADERS, then DATA until END_STREAM) on a client stream.
private final class ResponseCollector: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame.FramePayload

    private let promise: EventLoopPromise<TestResponse>
    private var headers: HPACKHeaders?
    private var body: [UInt8] = []
    private var isComplete = false

    init(promise: EventLoopPromise<TestResponse>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let endStream: Bool
        switch self.unwrapInboundIn(data) {
        case .headers(let frame):
            if self.headers == nil { self.headers = frame.headers }
            endStream = frame.endStream
        case .data(let frame):
            if case .byteBuffer(let buffer) = frame.data { self.body += buffer.readableBytesView }
            endStream = frame.endStream
        default:
            endStream = false
        }
        guard endStream, !self.isComplete else { return }
        self.isComplete = true
        let headers = self.headers ?? HPACKHeaders()
        let status = headers.first(name: ":status").flatMap { Int($0) } ?? -1
        self.promise.succeed(TestResponse(status: status, headers: headers, body: self.body))
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !self.isComplete {
            self.isComplete = true
            self.promise.fail(ChannelError.eof)
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !self.isComplete {
            self.isComplete = true
            self.promise.fail(error)
        }
        context.close(promise: nil)
    }
}

/// Reports the SETTINGS_MAX_CONCURRENT_STREAMS from the server's first SETTINGS frame.
private final class SettingsObserver: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame

    private let promise: EventLoopPromise<Int?>
    private var hasReported = false

    init(promise: EventLoopPromise<Int?>) {
        self.promise = promise
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = self.unwrapInboundIn(data)
        if case .settings(.settings(let settings)) = frame.payload, !self.hasReported {
            self.hasReported = true
            self.promise.succeed(settings.first { $0.parameter == .maxConcurrentStreams }?.value)
        }
        context.fireChannelRead(data)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !self.hasReported {
            self.hasReported = true
            self.promise.fail(ChannelError.eof)
        }
        context.fireChannelInactive()
    }
}

/// What the server said at the connection level, recorded for assertions.
final class ConnectionFrameLog: Sendable {
    struct GoAway: Sendable, Equatable {
        var lastStreamID: Int
        var errorCode: HTTP2ErrorCode
        var debugData: String
    }

    private let state = NIOLockedValueBox<(maxConcurrentStreams: [Int], goAways: [GoAway])>(([], []))

    /// SETTINGS_MAX_CONCURRENT_STREAMS of every SETTINGS frame that carried it, in order.
    var advertisedMaxConcurrentStreams: [Int] { self.state.withLockedValue { $0.maxConcurrentStreams } }
    var goAways: [GoAway] { self.state.withLockedValue { $0.goAways } }

    fileprivate func record(maxConcurrentStreams: Int) {
        self.state.withLockedValue { $0.maxConcurrentStreams.append(maxConcurrentStreams) }
    }

    fileprivate func record(_ goAway: GoAway) {
        self.state.withLockedValue { $0.goAways.append(goAway) }
    }
}

/// Feeds ``ConnectionFrameLog``.
private final class ConnectionFrameRecorder: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame

    private let log: ConnectionFrameLog

    init(log: ConnectionFrameLog) {
        self.log = log
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data).payload {
        case .settings(.settings(let settings)):
            if let limit = settings.last(where: { $0.parameter == .maxConcurrentStreams }) {
                self.log.record(maxConcurrentStreams: limit.value)
            }
        case .goAway(let lastStreamID, let errorCode, let opaqueData):
            self.log.record(
                ConnectionFrameLog.GoAway(
                    lastStreamID: Int(lastStreamID),
                    errorCode: errorCode,
                    debugData: opaqueData.map { String(buffer: $0) } ?? ""
                )
            )
        default:
            break
        }
        context.fireChannelRead(data)
    }
}

/// Makes ES256 provider tokens the way a provider does.
struct ProviderTokenFactory {
    let keyID: String
    let teamID: String
    let privateKey: P256.Signing.PrivateKey

    init(keyID: String = "KEY1234567", teamID: String = "TEAM123456", privateKey: P256.Signing.PrivateKey = .init()) {
        self.keyID = keyID
        self.teamID = teamID
        self.privateKey = privateKey
    }

    func token(issuedAt: Date = Date(), algorithm: String = "ES256", keyID: String? = nil, teamID: String? = nil) throws -> String {
        let header = Self.base64URL(Array(#"{"alg":"\#(algorithm)","kid":"\#(keyID ?? self.keyID)"}"#.utf8))
        let claims = Self.base64URL(
            Array(#"{"iss":"\#(teamID ?? self.teamID)","iat":\#(Int64(issuedAt.timeIntervalSince1970))}"#.utf8)
        )
        let signingInput = "\(header).\(claims)"
        let signature = try self.privateKey.signature(for: SHA256.hash(data: Array(signingInput.utf8)))
        return "\(signingInput).\(Self.base64URL(Array(signature.rawRepresentation)))"
    }

    static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// Runs a mock server for the duration of `body`, then cancels it and waits for it to stop
/// (stopping closes every client connection, so tests need not close their clients).
func withMockAPNSServer<Result: Sendable>(
    _ configuration: MockAPNSConfiguration = MockAPNSConfiguration(),
    _ body: @Sendable (_ server: MockAPNSServer, _ port: Int, _ caPath: String) async throws -> Result
) async throws -> Result {
    var configuration = configuration
    let directory = FileManager.default.temporaryDirectory
        .appendingPathComponent("mock-apns-tests-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: directory) }
    let caPath = directory.appendingPathComponent("nested/ca.pem").path
    configuration.caCertificatePath = caPath

    var logger = Logger(label: "mock-apns-tests")
    logger.logLevel = .warning
    let server = MockAPNSServer(configuration: configuration, logger: logger)

    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await server.run() }
        do {
            let port = try await server.listeningPort()
            let result = try await body(server, port, caPath)
            group.cancelAll()
            try await group.waitForAll()
            return result
        } catch {
            group.cancelAll()
            try? await group.waitForAll()
            throw error
        }
    }
}

/// A 64-digit lowercase hex device token.
func makeDeviceToken(_ seed: UInt8 = 0xAB) -> String {
    String(repeating: String(format: "%02x", seed), count: 32)
}

/// A JSON alert payload of exactly `size` bytes.
func makePayload(size: Int) -> [UInt8] {
    let prefix = Array(#"{"aps":{"alert":""#.utf8)
    let suffix = Array(#""}}"#.utf8)
    return prefix + [UInt8](repeating: UInt8(ascii: "x"), count: size - prefix.count - suffix.count) + suffix
}
