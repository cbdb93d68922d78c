// swift-tools-version:6.2
import PackageDescription

/// Settings shared by every Swift target: Swift 6 language mode plus the upcoming features
/// the server ecosystem (NIO, Hummingbird) turns on, and no warning left standing (the setting
/// applies to Herald's own targets, not to its dependencies).
let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    .treatAllWarnings(as: .error),
]

/// Test targets compile without optimisation, in the release build too: the code under test is
/// optimised in its own modules, the tests only drive it, and an optimised build of the tests
/// was most of a warm rebuild's time (IntegrationTests alone: 68 s with -O, 13 s without).
let testSwiftSettings: [SwiftSetting] = swiftSettings + [.unsafeFlags(["-Onone"])]

let package = Package(
    name: "herald",
    platforms: [.macOS(.v15)],
    products: [
        // An APNs client for Swift servers: request types and reasons, provider tokens, and the
        // pooled HTTP/2 client with deadlines and Apple's rules, as a ServiceLifecycle service.
        .library(name: "APNSClient", targets: ["PushCore", "APNSCore", "HTTP2Transport", "HTTP2TLS", "APNSWire", "APNSHTTP2"]),
        // The delivery pipeline, embeddable with your own message source, publisher, token
        // store, ledger and APNs client; it links no Kafka or PostgreSQL client.
        .library(name: "PushPipeline", targets: ["PushPipeline", "KafkaMessages", "PushStores", "PushCore", "APNSCore", "JSONCore", "WebPushCore"]),
        // The pipeline's parts in memory (source, publisher, registry and ledger, a scripted
        // APNs client), to test an embedding of the pipeline without a broker or a database.
        .library(name: "PushPipelineTesting", targets: ["PushPipelineTesting"]),
        // A mock APNs (HTTP/2 over TLS, token and certificate authentication) for tests.
        .library(name: "MockAPNS", targets: ["MockAPNS"]),
        // An FCM HTTP v1 client: the message and its validation, the answers' classification,
        // the OAuth token source and the sender over Herald's own HTTP/2 client.
        .library(name: "FCMClient", targets: ["PushCore", "FCMCore", "HTTP2Transport", "HTTP2TLS", "FCMHTTP", "JSONCore"]),
        // A mock FCM HTTP v1 API and OAuth token endpoint (HTTP/2 over TLS) for tests.
        .library(name: "MockFCM", targets: ["MockFCM"]),
        // A Web Push client (RFC 8030, 8291, 8292): subscriptions checked against a host
        // allow-list, message encryption, VAPID, and the sender over Herald's own HTTP/2 client.
        .library(name: "WebPushClient", targets: ["PushCore", "WebPushCore", "HTTP2Transport", "HTTP2TLS", "WebPushHTTP"]),
        // A mock push service (several origins, HTTP/2 over TLS) that decrypts what it receives.
        .library(name: "MockWebPush", targets: ["MockWebPush"]),
        .executable(name: "herald", targets: ["Herald"]),
        .executable(name: "mock-apns", targets: ["MockAPNSServer"]),
        .executable(name: "mock-fcm", targets: ["MockFCMServer"]),
        .executable(name: "mock-webpush", targets: ["MockWebPushServer"]),
        .executable(name: "herald-demo", targets: ["HeraldDemo"]),
        .executable(name: "herald-bench", targets: ["HeraldBench"]),
    ],
    traits: [
        .default(enabledTraits: ["OTLPTracing"]),
        .trait(
            name: "OTLPTracing",
            description: """
                Exports traces over OTLP/HTTP with swift-otel. On by default; without it Herald \
                builds several minutes faster and links no OTel code (HERALD_OTEL_TRACES is then a \
                configuration error). A ThreadSanitizer build needs it off: swift-otel 1.6.0 does \
                not compile under -sanitize=thread with Swift 6.3.1.
                """
        ),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        // OTLP over HTTP only: the gRPC exporter's dependencies would double the build.
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        // The OAuth token exchange of FCM (one request per project an hour).
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Parses HERALD_CONFIG_FILE (YAML or JSON) once, for its key list and its values; the
        // tests read deploy/'s YAML with it.
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
        // The configuration readers, over the environment and the parsed file (without its own
        // YAML trait: Herald parses the file itself).
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
    ],
    targets: [
        // C shim for Debian's librdkafka: the only place C is imported.
        .systemLibrary(
            name: "CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        // The records the pipeline reads and publishes, with no client library.
        .target(name: "KafkaMessages", swiftSettings: swiftSettings),
        // What every platform and stage shares: the wall clock, durations in whole units,
        // backoff, the transport error, stream precedence, a batch sent one task per request.
        .target(name: "PushCore", swiftSettings: swiftSettings),
        // What every component's configuration type reads with, over swift-configuration:
        // integers in a range and flags that stop start-up when set but unusable, secrets read
        // from files, and the error naming the environment variable.
        .target(
            name: "ConfigReading",
            dependencies: [.product(name: "Configuration", package: "swift-configuration")],
            swiftSettings: swiftSettings
        ),
        // JSON as the package reads and writes it: one value type, one strict parser, one
        // string escaper (events, results, FCM messages and answers, JWTs, log lines).
        .target(name: "JSONCore", swiftSettings: swiftSettings),
        .target(
            name: "KafkaTransport",
            dependencies: [
                "CRdKafka",
                "ConfigReading",
                "PushCore",
                "KafkaMessages",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "APNSCore",
            dependencies: ["PushCore"],
            swiftSettings: swiftSettings
        ),
        // FCM HTTP v1 without networking: the message as sent, its validation, the error body
        // and the classification of answers, the service-account key file.
        .target(
            name: "FCMCore",
            dependencies: ["JSONCore", "PushCore"],
            swiftSettings: swiftSettings
        ),
        // Herald's HTTP/2 client, for every platform: one connection's frame code and state
        // machine (``HTTP2ConnectionCore`` over an exchange: what a request is on the wire), the
        // stream pool with the lanes' precedence, the batch start. No TLS, socket or crypto code,
        // so the fuzz target builds without them.
        .target(
            name: "HTTP2Transport",
            dependencies: [
                "PushCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            // Its generic connection core, pool and batch are specialised for each platform's
            // exchange and connection in that platform's module, so every body must cross the
            // module boundary, private ones too (plain -cross-module-optimization leaves those
            // out). Unspecialised, the APNs sender took 3.7 to 4.5 times h2load's CPU per
            // request; specialised, 2.4 times (herald-bench sender, same session; BENCHMARKS.md).
            swiftSettings: swiftSettings + [.unsafeFlags(["-enable-cmo-everything"])]
        ),
        // The TLS connections every platform's HTTP/2 client runs on (apart from the transport,
        // so the fuzz target builds without swift-nio-ssl).
        .target(
            name: "HTTP2TLS",
            dependencies: [
                "HTTP2Transport",
                "PushCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: swiftSettings
        ),
        // APNs' exchange on the HTTP/2 transport: its header encoder, answer body and handler.
        .target(
            name: "APNSWire",
            dependencies: [
                "PushCore",
                "APNSCore",
                "HTTP2Transport",
                "JSONCore",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "APNSHTTP2",
            dependencies: [
                "JSONCore",
                "PushCore",
                "APNSCore",
                "HTTP2Transport",
                "HTTP2TLS",
                "APNSWire",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The FCM transport: the OAuth token source (RS256 assertions, over AsyncHTTPClient) and
        // the sender over the HTTP/2 transport.
        .target(
            name: "FCMHTTP",
            dependencies: [
                "ConfigReading",
                "JSONCore",
                "PushCore",
                "HTTP2Transport",
                "HTTP2TLS",
                "FCMCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // The registry's and the ledger's protocols and values, with no database driver.
        .target(
            name: "PushStores",
            dependencies: ["PushCore", "APNSCore"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PostgresStores",
            dependencies: [
                "APNSCore",
                "ConfigReading",
                "PushCore",
                "PushStores",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PushPipeline",
            dependencies: [
                "ConfigReading",
                "JSONCore",
                "APNSCore",
                "FCMCore",
                "WebPushCore",
                "PushCore",
                "PushStores",
                "KafkaMessages",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Configuration", package: "swift-configuration"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "PushPipelineTesting",
            dependencies: ["PushCore", "PushPipeline", "APNSCore", "PushStores", "KafkaMessages"],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "HeraldService",
            dependencies: [
                "PushCore",
                "HTTP2Transport",
                "ConfigReading",
                "JSONCore",
                "APNSCore",
                "APNSHTTP2",
                "FCMCore",
                "FCMHTTP",
                "WebPushCore",
                "WebPushHTTP",
                "PushStores",
                "PostgresStores",
                "KafkaMessages",
                "KafkaTransport",
                "PushPipeline",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "OTel", package: "swift-otel", condition: .when(traits: ["OTLPTracing"])),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "Herald",
            dependencies: [
                "PushCore",
                "JSONCore",
                "HeraldService",
                "PushPipeline",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the mock push services share: a throw-away CA and TLS identity, the listening
        // sockets and their connections, HTTP/2 receive windows, an integer wall clock.
        .target(
            name: "MockServerSupport",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "MockAPNS",
            dependencies: [
                "MockServerSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "MockAPNSServer",
            dependencies: [
                "PushCore",
                "MockAPNS",
                "MockServerSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "MockFCM",
            dependencies: [
                "PushCore",
                "JSONCore",
                "MockServerSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "MockFCMServer",
            dependencies: [
                "PushCore",
                "MockFCM",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        // libFuzzer target over the APNs connection handler (built with -sanitize=fuzzer by
        // scripts/test.sh; an ordinary build only prints how to fuzz).
        .executableTarget(
            name: "FuzzConnectionHandler",
            dependencies: [
                "PushCore",
                "APNSCore",
                "APNSWire",
                "HTTP2Transport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "HeraldDemo",
            dependencies: [
                "PushCore",
                "APNSCore",
                "KafkaMessages",
                "KafkaTransport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "HeraldBench",
            dependencies: [
                "PushCore",
                "HTTP2Transport",
                "APNSCore",
                "APNSHTTP2",
                "PushStores",
                "FCMCore",
                "FCMHTTP",
                "PostgresStores",
                "HeraldService",
                "KafkaMessages",
                "KafkaTransport",
                "PushPipeline",
                "WebPushCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "KafkaTransportTests",
            dependencies: [
                "KafkaMessages",
                "KafkaTransport",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "JSONCoreTests",
            dependencies: ["JSONCore"],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "FCMCoreTests",
            dependencies: ["PushCore", "JSONCore", "FCMCore"],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "FCMHTTPTests",
            dependencies: [
                "PushCore",
                "HTTP2Transport",
                "FCMCore",
                "FCMHTTP",
                "MockFCM",
                "MockServerSupport",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "APNSCoreTests",
            dependencies: ["JSONCore", "APNSCore", "PushCore"],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "APNSHTTP2Tests",
            dependencies: [
                "PushCore",
                "APNSHTTP2",
                "APNSWire",
                "HTTP2Transport",
                "APNSCore",
                "MockAPNS",
                "MockServerSupport",
                "PushPipeline",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "PostgresStoresTests",
            dependencies: [
                "PushCore",
                "PushStores",
                "PostgresStores",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "PushPipelineTests",
            dependencies: [
                "PushCore",
                "JSONCore",
                "PushPipeline", "PushPipelineTesting", "APNSCore", "PushStores", "PostgresStores", "FCMCore", "KafkaMessages", "KafkaTransport", "WebPushCore",
                "HTTP2Transport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
        // The simulation of the shipped pipeline, optimised in the release build, unlike the
        // other tests: its scheduler, simulated services and checks were half of each world's CPU
        // unoptimised, and the test command runs thousands of worlds.
        .testTarget(
            name: "PipelineSimulationTests",
            dependencies: [
                "PushCore",
                "JSONCore",
                "PushPipeline", "PushPipelineTesting", "APNSCore", "PushStores", "PostgresStores", "FCMCore", "KafkaMessages", "KafkaTransport", "WebPushCore",
                "HTTP2Transport", "MockServerSupport",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "HeraldServiceTests",
            dependencies: [
                "PushCore",
                "HTTP2Transport",
                "JSONCore",
                "HeraldService",
                "APNSHTTP2",
                "FCMCore",
                "FCMHTTP",
                "MockFCM",
                "KafkaMessages",
                "KafkaTransport",
                "PushPipeline",
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "MockServerTests",
            dependencies: [
                "PushCore",
                "MockAPNS",
                "MockServerSupport",
                "MockFCM",
                "MockWebPush",
                "WebPushCore",
                "JSONCore",
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .target(
            name: "WebPushCore",
            dependencies: [
                "JSONCore",
                "PushCore",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: swiftSettings
        ),
        // The web push sender over the shared HTTP/2 transport: a pool per push-service origin.
        .target(
            name: "WebPushHTTP",
            dependencies: [
                "ConfigReading",
                "PushCore",
                "HTTP2Transport",
                "HTTP2TLS",
                "WebPushCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Metrics", package: "swift-metrics"),
            ],
            swiftSettings: swiftSettings
        ),
        // A mock push service: several origins, decrypts each message, verifies VAPID.
        .target(
            name: "MockWebPush",
            dependencies: [
                "PushCore",
                "JSONCore",
                "MockServerSupport",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "MockWebPushServer",
            dependencies: [
                "MockWebPush",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "WebPushHTTPTests",
            dependencies: [
                "PushCore",
                "WebPushCore",
                "WebPushHTTP",
                "MockWebPush",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "WebPushCoreTests",
            dependencies: [
                "WebPushCore",
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: testSwiftSettings
        ),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "PushCore",
                "APNSCore",
                .product(name: "Yams", package: "Yams"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                "HeraldService",
                "KafkaMessages",
                "KafkaTransport",
                "MockAPNS",
                "MockServerSupport",
                "MockFCM",
                "MockWebPush",
                "FCMCore",
                "PushPipeline",
                "PushStores",
                "PostgresStores",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: testSwiftSettings
        ),
    ]
)
