import Foundation
import Subprocess

/// Opens an address in the person's browser where there is one: `open` on macOS, `xdg-open` on
/// a Linux desktop (a display is set). Failing to is not an error: the address is printed.
enum Browser {
    /// Whether a browser was asked to open `address`; gives up on an opener that has not
    /// returned within 10 s (the browser is then most likely open).
    static func open(_ address: String) async -> Bool {
        guard isWebPage(address) else { return false }
        #if os(macOS)
            let opener = "open"
        #else
            let environment = ProcessInfo.processInfo.environment
            guard environment["DISPLAY"].map({ !$0.isEmpty }) == true || environment["WAYLAND_DISPLAY"].map({ !$0.isEmpty }) == true else {
                return false
            }
            let opener = "xdg-open"
        #endif
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                do {
                    let result = try await Subprocess.run(.name(opener), arguments: [address], output: .discarded, error: .discarded)
                    return result.terminationStatus.isSuccess
                } catch {
                    return false
                }
            }
            group.addTask {
                try? await Task.sleep(for: .seconds(10))
                return true
            }
            let opened = await group.next() ?? false
            group.cancelAll()
            return opened
        }
    }

    /// Whether `address` is a web page to hand an opener: an `https://` address, or `http://` on
    /// this machine (a server for tests). The sign-in address comes from the server: an opener
    /// takes `file:`, `smb:` and an application's own schemes too, and `open` takes an address
    /// beginning with `-` for an option.
    static func isWebPage(_ address: String) -> Bool {
        guard let url = URLComponents(string: address), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty else {
            return false
        }
        return scheme == "https" || scheme == "http" && ["127.0.0.1", "localhost", "[::1]", "::1"].contains(host.lowercased())
    }
}
