//! Writes every target's seeds into `DIR/<target>/seed-<n>` (default DIR:
//! `fuzz/corpus`), for a fuzzer to start from. Run by `scripts/fuzz.sh`.

fn main() -> std::io::Result<()> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".into());
    for target in coterie_fuzz::TARGETS {
        let dir = std::path::Path::new(&dir).join(target.name);
        std::fs::create_dir_all(&dir)?;
        let seeds = (target.seeds)();
        for (i, seed) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i}")), seed)?;
        }
        println!("{}: {} seeds in {}", target.name, seeds.len(), dir.display());
    }
    Ok(())
}
