//! `shiitake-bindgen [--names] INPUT.wasm OUT_DIR`: what scripts/build.sh
//! ran as `wasm-bindgen --target module --out-name shiitake
//! --experimental-reset-state-function --remove-producers-section
//! [--remove-name-section] INPUT --out-dir OUT_DIR`, through the same
//! library and the CLI's defaults for every other option.

use std::process::ExitCode;
use wasm_bindgen_cli_support::Bindgen;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--version") {
        println!("shiitake-bindgen {}", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let (names, rest) = match args.split_first() {
        Some((flag, rest)) if flag == "--names" => (true, rest),
        _ => (false, &args[..]),
    };
    let [input, out_dir] = rest else {
        eprintln!("usage: shiitake-bindgen [--names] INPUT.wasm OUT_DIR");
        return ExitCode::from(2);
    };
    match generate(input, out_dir, names) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:?}");
            ExitCode::FAILURE
        }
    }
}

fn generate(input: &str, out_dir: &str, names: bool) -> anyhow::Result<()> {
    let mut b = Bindgen::new();
    b.module(true)?;
    // Every option the CLI sets, at the CLI's default where build.sh passes
    // no flag (some differ from `Bindgen::new()`'s, e.g. the module path).
    b.input_path(input)
        .debug(false)
        .demangle(true)
        .keep_lld_exports(false)
        .keep_debug(false)
        .split_debug_info(false)
        .remove_name_section(!names)
        .remove_producers_section(true)
        .typescript(true)
        .omit_imports(false)
        .omit_default_module_path(false)
        .split_linked_modules(false)
        .js_string_builtins(false)
        .ts_typed_array_buffers(false)
        .reset_state_function(true)
        .force_enable_abort_handler(false)
        .out_name("shiitake");
    b.generate(out_dir)
}
