//! What one instantiation of a component costs the sandbox, read from its bytes before it is
//! ever run: how many core instances it creates, how many memories and tables they define, and
//! how much memory those memories start with.
//!
//! A policy built with the default Rust toolchain is one core module instantiated once. Other
//! toolchains compose: componentize-qjs and wit-component's adapters instantiate several core
//! modules (the program, a shim of indirect calls, a fixup), and a composition tool (wac) nests
//! whole components. wasmtime counts all of them against the store's limiter when the component
//! is instantiated, which for a policy first happens in `describe()` at load; a component over
//! the limits would fail there as a trap with a message about "instance count too high". This
//! walk finds the same totals up front, so that such a component is refused as what it is, with
//! what it has and what is allowed, and never started.
//!
//! The walk follows the component model's index spaces: core modules and components are
//! defined by nested sections, re-exported, or aliased from an enclosing component; every
//! `instantiate` of a module costs one core instance and its own memories and tables, every
//! `instantiate` of a nested component costs that component's whole total. A module or
//! component that arrives from outside (an import, an export of an instance) cannot be sized
//! here; a policy imports nothing of the kind, and one that instantiates such a thing is refused.

use std::fmt;

use wasmparser::{
    ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
    ComponentTypeRef, Instance, Parser, Payload,
};

/// A component whose instances could not be counted: it does not parse, or it instantiates
/// something from outside whose size cannot be known. (This module's only error, kept apart
/// from [`crate::error`] so that the policy errors can name a [`ComponentShape`].)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the component's instances could not be counted: {reason}")]
pub struct UncountedComponent {
    reason: String,
}

/// What one instantiation of a component (or of one core module) needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ComponentShape {
    /// Core module instances created.
    pub core_instances: u64,
    /// Linear memories defined by those instances (imported memories are shared, not new).
    pub memories: u64,
    /// Tables defined by those instances.
    pub tables: u64,
    /// Bytes all those memories start with, together.
    pub initial_memory_bytes: u64,
}

impl ComponentShape {
    /// Reads the shape of the component in `bytes`. Fails only on bytes that do not parse as
    /// a component or that instantiate something whose size cannot be known.
    pub fn of(bytes: &[u8]) -> Result<Self, UncountedComponent> {
        walk(bytes).map_err(|reason| UncountedComponent { reason })
    }

    fn add(&mut self, other: &Self) {
        self.core_instances = self.core_instances.saturating_add(other.core_instances);
        self.memories = self.memories.saturating_add(other.memories);
        self.tables = self.tables.saturating_add(other.tables);
        self.initial_memory_bytes = self
            .initial_memory_bytes
            .saturating_add(other.initial_memory_bytes);
    }
}

impl fmt::Display for ComponentShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} core instance{}, {} memor{} ({} bytes to start with) and {} table{}",
            self.core_instances,
            if self.core_instances == 1 { "" } else { "s" },
            self.memories,
            if self.memories == 1 { "y" } else { "ies" },
            self.initial_memory_bytes,
            self.tables,
            if self.tables == 1 { "" } else { "s" },
        )
    }
}

/// A component being read: its index spaces of modules and components, each entry the shape
/// of one instantiation of it (`None`: it came from outside and cannot be sized), and what its
/// own instantiations have added up to so far.
#[derive(Default)]
struct ComponentFrame {
    modules: Vec<Option<ComponentShape>>,
    components: Vec<Option<ComponentShape>>,
    total: ComponentShape,
}

enum Frame {
    Component(ComponentFrame),
    Module(ComponentShape),
}

/// The shape of the component in `bytes`, one section at a time. Over 100 lines: one arm per
/// kind of section the component model defines, each a few lines (aliases and ends have
/// functions of their own).
fn walk(bytes: &[u8]) -> Result<ComponentShape, String> {
    let mut stack: Vec<Frame> = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|error| error.to_string())?;
        match payload {
            Payload::Version { encoding, .. } => match encoding {
                wasmparser::Encoding::Component => {
                    stack.push(Frame::Component(ComponentFrame::default()));
                }
                wasmparser::Encoding::Module => {
                    if stack.is_empty() {
                        return Err("this is a core module, not a component".into());
                    }
                    stack.push(Frame::Module(ComponentShape {
                        core_instances: 1,
                        ..ComponentShape::default()
                    }));
                }
            },
            Payload::MemorySection(reader) => {
                let Some(Frame::Module(module)) = stack.last_mut() else {
                    return Err("a memory section outside a core module".into());
                };
                for memory in reader {
                    let memory = memory.map_err(|error| error.to_string())?;
                    let page_bytes = 1u64 << memory.page_size_log2.unwrap_or(16).min(16);
                    module.memories += 1;
                    module.initial_memory_bytes = module
                        .initial_memory_bytes
                        .saturating_add(memory.initial.saturating_mul(page_bytes));
                }
            }
            Payload::TableSection(reader) => {
                let Some(Frame::Module(module)) = stack.last_mut() else {
                    return Err("a table section outside a core module".into());
                };
                module.tables += u64::from(reader.count());
            }
            Payload::InstanceSection(reader) => {
                let frame = component_frame(&mut stack)?;
                for instance in reader {
                    match instance.map_err(|error| error.to_string())? {
                        Instance::Instantiate { module_index, .. } => {
                            let module = sized(&frame.modules, module_index, "core module")?;
                            frame.total.add(&module);
                        }
                        // A bag of existing items: nothing is created.
                        Instance::FromExports(_) => {}
                    }
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                let frame = component_frame(&mut stack)?;
                for instance in reader {
                    match instance.map_err(|error| error.to_string())? {
                        ComponentInstance::Instantiate {
                            component_index, ..
                        } => {
                            let component = sized(&frame.components, component_index, "component")?;
                            frame.total.add(&component);
                        }
                        ComponentInstance::FromExports(_) => {}
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => aliases(&mut stack, reader)?,
            Payload::ComponentImportSection(reader) => {
                let frame = component_frame(&mut stack)?;
                for import in reader {
                    match import.map_err(|error| error.to_string())?.ty {
                        ComponentTypeRef::Module(_) => frame.modules.push(None),
                        ComponentTypeRef::Component(_) => frame.components.push(None),
                        _ => {}
                    }
                }
            }
            // An export of a module or a component is a new index for the same item.
            Payload::ComponentExportSection(reader) => {
                let frame = component_frame(&mut stack)?;
                for export in reader {
                    let export = export.map_err(|error| error.to_string())?;
                    match export.kind {
                        ComponentExternalKind::Module => {
                            let shape = frame.modules.get(export.index as usize).copied();
                            frame.modules.push(shape.flatten());
                        }
                        ComponentExternalKind::Component => {
                            let shape = frame.components.get(export.index as usize).copied();
                            frame.components.push(shape.flatten());
                        }
                        _ => {}
                    }
                }
            }
            Payload::End(_) => {
                if let Some(total) = end(&mut stack)? {
                    return Ok(total);
                }
            }
            _ => {}
        }
    }
    Err("the component ends early".into())
}

/// An alias section: modules and components aliased from an enclosing component take its
/// shapes; those exported by an instance cannot be sized.
fn aliases(
    stack: &mut [Frame],
    reader: wasmparser::ComponentAliasSectionReader<'_>,
) -> Result<(), String> {
    for alias in reader {
        let alias = alias.map_err(|error| error.to_string())?;
        match alias {
            ComponentAlias::Outer { kind, count, index } => {
                let outer = outer_frame(stack, count)?;
                match kind {
                    ComponentOuterAliasKind::CoreModule => {
                        let shape = outer.modules.get(index as usize).copied();
                        component_frame(stack)?.modules.push(shape.flatten());
                    }
                    ComponentOuterAliasKind::Component => {
                        let shape = outer.components.get(index as usize).copied();
                        component_frame(stack)?.components.push(shape.flatten());
                    }
                    ComponentOuterAliasKind::CoreType | ComponentOuterAliasKind::Type => {}
                }
            }
            // A module or component exported by an instance: its size is not
            // known here.
            ComponentAlias::InstanceExport { kind, .. } => {
                let frame = component_frame(stack)?;
                match kind {
                    ComponentExternalKind::Module => frame.modules.push(None),
                    ComponentExternalKind::Component => frame.components.push(None),
                    _ => {}
                }
            }
            ComponentAlias::CoreInstanceExport { .. } => {}
        }
    }
    Ok(())
}

/// The end of the module or component at the top of the stack: its shape goes to its parent's
/// index space; the outermost component's total is the answer (`Some`).
fn end(stack: &mut Vec<Frame>) -> Result<Option<ComponentShape>, String> {
    let finished = stack.pop().ok_or("an end with nothing open")?;
    let shape = match &finished {
        Frame::Module(shape) => *shape,
        Frame::Component(component) => component.total,
    };
    match stack.last_mut() {
        None => match finished {
            Frame::Component(component) => Ok(Some(component.total)),
            Frame::Module(_) => Err("this is a core module, not a component".into()),
        },
        Some(Frame::Component(parent)) => match finished {
            Frame::Module(_) => {
                parent.modules.push(Some(shape));
                Ok(None)
            }
            Frame::Component(_) => {
                parent.components.push(Some(shape));
                Ok(None)
            }
        },
        Some(Frame::Module(_)) => Err("a core module nests nothing".into()),
    }
}

/// The component being read at the top of the stack.
fn component_frame(stack: &mut [Frame]) -> Result<&mut ComponentFrame, String> {
    match stack.last_mut() {
        Some(Frame::Component(frame)) => Ok(frame),
        _ => Err("a component section outside a component".into()),
    }
}

/// The component `count` levels out from the one being read (0: itself).
fn outer_frame(stack: &[Frame], count: u32) -> Result<&ComponentFrame, String> {
    stack
        .iter()
        .rev()
        .filter_map(|frame| match frame {
            Frame::Component(component) => Some(component),
            Frame::Module(_) => None,
        })
        .nth(count as usize)
        .ok_or_else(|| format!("an outer alias {count} levels out, past the outermost component"))
}

/// The shape of the item at `index`, or why it cannot be known.
fn sized(
    space: &[Option<ComponentShape>],
    index: u32,
    what: &str,
) -> Result<ComponentShape, String> {
    match space.get(index as usize) {
        Some(Some(shape)) => Ok(*shape),
        Some(None) => Err(format!(
            "it instantiates {what} {index}, which comes from outside the component and cannot be sized"
        )),
        None => Err(format!(
            "it instantiates {what} {index}, which is not defined"
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::error::PolicyError;
    use wasm_encoder::{
        ComponentBuilder, ComponentExportKind, ComponentTypeRef, InstanceType, MemorySection,
        MemoryType, Module, RefType, TableSection, TableType,
    };

    use super::*;
    use crate::runtime::{DEFAULT_POLICY_WASM, PolicyLimits, PolicyRuntime};

    /// A core module defining a memory of each of `memory_pages` and `tables` tables.
    fn module(memory_pages: &[u64], tables: u32) -> Module {
        let mut module = Module::new();
        let mut table_section = TableSection::new();
        for _ in 0..tables {
            table_section.table(TableType {
                element_type: RefType::FUNCREF,
                table64: false,
                minimum: 1,
                maximum: Some(1),
                shared: false,
            });
        }
        module.section(&table_section);
        let mut memory_section = MemorySection::new();
        for pages in memory_pages {
            memory_section.memory(MemoryType {
                minimum: *pages,
                maximum: None,
                memory64: false,
                shared: false,
                page_size_log2: None,
            });
        }
        module.section(&memory_section);
        module
    }

    /// A component that imports the contract's types (as a policy does), so that past the
    /// shape check it also passes the import check, with `build` adding the rest.
    fn component(build: impl FnOnce(&mut ComponentBuilder)) -> Vec<u8> {
        let mut builder = ComponentBuilder::default();
        let types = builder.type_instance(None, &InstanceType::new());
        builder.import(
            crate::runtime::CONTRACT_TYPES_IMPORT,
            ComponentTypeRef::Instance(types),
        );
        build(&mut builder);
        builder.finish()
    }

    fn no_args() -> Vec<(&'static str, ComponentExportKind, u32)> {
        Vec::new()
    }

    #[test]
    fn the_default_policy_is_one_instance_with_one_memory() {
        let shape = ComponentShape::of(DEFAULT_POLICY_WASM).unwrap();
        assert_eq!(shape.core_instances, 1, "{shape}");
        assert_eq!(shape.memories, 1, "{shape}");
        assert_eq!(
            shape.initial_memory_bytes,
            1 << 20,
            "guest/build.rs: --initial-memory"
        );
        assert!(shape.tables <= 1, "{shape}");
    }

    #[test]
    fn every_instantiation_counts_nested_components_included() {
        let bytes = component(|outer| {
            // A program with its memory and a table, a shim with a table, both instantiated
            // once; the shim twice more.
            let program = outer.core_module(None, &module(&[16], 1));
            let shim = outer.core_module(None, &module(&[], 1));
            outer.core_instantiate(None, program, []);
            for _ in 0..3 {
                outer.core_instantiate(None, shim, []);
            }
            // A nested component of two modules, instantiated twice: twice its total.
            let mut inner = ComponentBuilder::default();
            let first = inner.core_module(None, &module(&[1], 0));
            let second = inner.core_module(None, &module(&[1, 2], 2));
            inner.core_instantiate(None, first, []);
            inner.core_instantiate(None, second, []);
            let nested = outer.component(None, inner);
            outer.instantiate(None, nested, no_args());
            outer.instantiate(None, nested, no_args());
            // Defined but never instantiated: costs nothing.
            outer.core_module(None, &module(&[100], 5));
        });
        let shape = ComponentShape::of(&bytes).unwrap();
        let page = 64 << 10;
        assert_eq!(
            shape,
            ComponentShape {
                core_instances: 1 + 3 + 2 * 2,
                memories: 1 + 2 * 3,
                tables: 1 + 3 + 2 * 2,
                initial_memory_bytes: 16 * page + 2 * 4 * page,
            }
        );
        assert_eq!(
            shape.to_string(),
            format!(
                "8 core instances, 7 memories ({} bytes to start with) and 8 tables",
                24 * page
            )
        );
    }

    #[test]
    fn a_component_over_the_limits_is_refused_at_load_naming_each() {
        let bytes = component(|builder| {
            let program = builder.core_module(None, &module(&[32], 3));
            for _ in 0..3 {
                builder.core_instantiate(None, program, []);
            }
        });
        let limits = PolicyLimits {
            max_core_instances: 2,
            max_memories: 4,
            max_tables: 8,
            max_memory_bytes: 4 << 20,
            ..PolicyLimits::default()
        };
        let error = PolicyRuntime::load(&bytes, limits).unwrap_err();
        let PolicyError::ExceedsSandbox { needs, over } = &error else {
            panic!("refused as over the sandbox, not {error:?}");
        };
        assert_eq!(needs.core_instances, 3);
        assert_eq!(
            over,
            &[
                "3 core instances where limits.policy_core_instances is 2".to_string(),
                "9 tables where limits.policy_tables is 8".to_string(),
                format!(
                    "{} bytes of memory to start with where limits.policy_memory_bytes is {}",
                    3 * 32 * (64 << 10),
                    4 << 20
                ),
            ]
        );
        let message = error.to_string();
        assert!(
            message.starts_with("policy component needs 3 core instances, 3 memories"),
            "{message}"
        );
        assert!(message.contains("Raise the setting"), "{message}");

        // Within the limits, the same component goes past the check (and fails later, as it
        // exports no policy).
        let roomy = PolicyLimits {
            max_core_instances: 3,
            max_tables: 9,
            max_memory_bytes: 8 << 20,
            ..limits
        };
        let error = PolicyRuntime::load(&bytes, roomy).unwrap_err();
        assert!(
            matches!(error, PolicyError::Incompatible { .. }),
            "past the shape check: {error:?}"
        );
    }

    #[test]
    fn a_component_over_the_largest_settings_is_refused_as_over_the_sandbox_before_compiling() {
        // More instances than any setting allows, so more than the pool was sized for: refused
        // by the same check, naming the setting, rather than by the pool's own check when the
        // component is compiled.
        let most = crate::bounds::POLICY_CORE_INSTANCES.max;
        let bytes = component(|builder| {
            let program = builder.core_module(None, &module(&[], 0));
            for _ in 0..=most {
                builder.core_instantiate(None, program, []);
            }
        });
        let error = PolicyRuntime::load(&bytes, PolicyLimits::default()).unwrap_err();
        let PolicyError::ExceedsSandbox { needs, over } = &error else {
            panic!("refused as over the sandbox, not {error:?}");
        };
        assert_eq!(needs.core_instances, most + 1);
        assert_eq!(
            over,
            &[format!(
                "{} core instances where limits.policy_core_instances is {}",
                most + 1,
                PolicyLimits::default().max_core_instances
            )]
        );
    }

    #[test]
    fn a_module_from_outside_cannot_be_sized_so_the_component_is_refused() {
        let bytes = component(|builder| {
            // A nested component that imports a core module and instantiates it.
            let mut inner = ComponentBuilder::default();
            let (module_type, encoder) = inner.core_type(None);
            encoder.module(&wasm_encoder::ModuleType::new());
            let imported = inner.import("program", ComponentTypeRef::Module(module_type));
            inner.core_instantiate(None, imported, []);
            let nested = builder.component(None, inner);
            builder.instantiate(None, nested, no_args());
        });
        let error = ComponentShape::of(&bytes).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("it instantiates core module 0, which comes from outside the component"),
            "{error}"
        );

        let error = ComponentShape::of(&module(&[1], 0).finish()).unwrap_err();
        assert!(
            error.to_string().contains("a core module, not a component"),
            "{error}"
        );
    }

    #[test]
    fn the_limiter_holds_all_memories_to_one_budget() {
        use wasmtime::ResourceLimiter;
        let limits = PolicyLimits {
            max_memory_bytes: 3 << 20,
            ..PolicyLimits::default()
        };
        let mut state = crate::runtime::sandbox::SandboxState::new(&limits);
        // Two memories created at 1 MiB each, then one grows by 1 MiB: 3 MiB in all.
        assert!(state.memory_growing(0, 1 << 20, None).unwrap());
        assert!(state.memory_growing(0, 1 << 20, None).unwrap());
        assert!(state.memory_growing(1 << 20, 2 << 20, None).unwrap());
        assert!(!state.memory_refused);
        // Any more, in either memory, is over.
        assert!(
            !state
                .memory_growing(1 << 20, (1 << 20) + 65_536, None)
                .unwrap()
        );
        assert!(state.memory_refused);
    }
}
