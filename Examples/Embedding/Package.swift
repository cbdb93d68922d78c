// swift-tools-version:6.1
// Depends on Herald's library products by name, as an app outside Herald would: built and run
// by scripts/test.sh. `APNSClientExample` sends a notification to the mock APNs with the APNs
// client; `PipelineExample` runs the pipeline with PushPipelineTesting's in-memory parts and links
// neither librdkafka nor postgres-nio.
import Foundation
import PackageDescription

/// Herald's checkout (two levels up); a path dependency is named by its directory, lowercased.
let herald = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
let heraldPackage = herald.lastPathComponent.lowercased()

let package = Package(
    name: "herald-embedding",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: herald.path),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto.git", from: "4.5.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
    ],
    targets: [
        .executableTarget(
            name: "APNSClientExample",
            dependencies: [
                .product(name: "APNSClient", package: heraldPackage),
                .product(name: "MockAPNS", package: heraldPackage),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility")]
        ),
        .executableTarget(
            name: "PipelineExample",
            dependencies: [
                .product(name: "PushPipeline", package: heraldPackage),
                .product(name: "PushPipelineTesting", package: heraldPackage),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility")]
        ),
    ]
)
